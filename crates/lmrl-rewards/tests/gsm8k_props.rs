//! Property tests of the GSM8K checker: it never panics, extraction is idempotent on its own
//! output, and the checker agrees with how numbers are written.
use lmrl_rewards::{check_answer, cut_continuation, extract_ground_truth, extract_response_answer};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_and_is_idempotent(s in "\\PC{0,80}") {
        let _ = extract_ground_truth(&s);
        let _ = check_answer(&s, "#### 42");
        if let Some(a) = extract_response_answer(&s) {
            prop_assert_eq!(extract_response_answer(&a), Some(a.clone()));
            prop_assert_eq!(check_answer(&s, &format!("#### {a}")).ok(), Some(1.0));
        }
    }

    #[test]
    fn numbery_strings(s in "[-$.,/0-9 a-zQ:!]{0,40}") {
        if let Some(a) = extract_response_answer(&s) {
            prop_assert_eq!(extract_response_answer(&a), Some(a.clone()));
            prop_assert!(a.chars().all(|c| c.is_ascii_digit() || matches!(c, '-' | '.' | '/')));
        }
        prop_assert!(cut_continuation(&s).len() <= s.len());
    }

    #[test]
    fn integers_round_trip(n in any::<i64>(), unit in "(| apples| dollars|\\.|!)") {
        let with_commas = {
            let d = n.unsigned_abs().to_string();
            let mut out = String::new();
            for (i, c) in d.chars().enumerate() {
                if i > 0 && (d.len() - i) % 3 == 0 { out.push(','); }
                out.push(c);
            }
            if n < 0 { format!("-{out}") } else { out }
        };
        let resp = format!("The answer is {with_commas}{unit}");
        prop_assert_eq!(check_answer(&resp, &format!("#### {n}")).ok(), Some(1.0));
        prop_assert_eq!(extract_response_answer(&resp), Some(n.to_string()));
        let wrong = n.wrapping_add(1);
        prop_assert_eq!(check_answer(&resp, &format!("#### {wrong}")).ok(), Some(0.0));
    }

    #[test]
    fn huge_numbers_compare_exactly(d in "[1-9][0-9]{30,300}", z in 0usize..5) {
        let resp = format!("so {d}.{}", "0".repeat(z));
        prop_assert_eq!(check_answer(&resp, &format!("#### {d}")).ok(), Some(1.0));
        prop_assert_eq!(check_answer(&resp, &format!("#### {d}1")).ok(), Some(0.0));
    }
}
