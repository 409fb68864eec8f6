//! Property tests of the GSM8K checker: it never panics on any text, extraction is idempotent on
//! its own output, and its verdict agrees with an independent oracle — rationals generated as
//! integers, compared by `i128` cross-multiplication, and written out in the textual forms a
//! model or a dataset uses (fractions, finite decimals, thousands separators, `$`, signs).
//!
//! `PROPTEST_CASES=N` raises (or lowers) the number of cases of every property.
use lmrl_rewards::{
    AnswerChecker, AnswerContext, Reward, Sample, check_answer, cut_continuation,
    extract_ground_truth, extract_response_answer,
};
use proptest::prelude::*;

/// `default_cases` unless `PROPTEST_CASES` is set (proptest's default config reads it).
fn config(default_cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    c
}

/// A rational `p / q` with `q > 0`, small enough that the oracle's `i128` products are exact.
#[derive(Debug, Clone, Copy)]
struct Rat {
    p: i64,
    q: u64,
}

impl Rat {
    fn oracle_eq(self, o: Rat) -> bool {
        i128::from(self.p) * i128::from(o.q) == i128::from(o.p) * i128::from(self.q)
    }
}

/// How to write a [`Rat`].
#[derive(Debug, Clone, Copy)]
struct Style {
    /// 0: `p/q`; 1: `(p·m)/(q·m)`; 2: a decimal when `q` is `2^a·5^b` (else `p/q`).
    form: u8,
    scale: u64,
    commas: bool,
    dollar: bool,
    extra_zeros: usize,
    leading_zeros: usize,
    /// `.5` instead of `0.5`.
    bare_point: bool,
    /// `-0` (and `-0/q`, `-0.00`) for zero.
    neg_zero: bool,
}

fn group(digits: &str) -> String {
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `k` with `10^k / q` an integer when `q = 2^a · 5^b`, else `None` (no finite decimal).
fn decimal_places(mut q: u64) -> Option<u32> {
    let (mut a, mut b) = (0u32, 0u32);
    while q.is_multiple_of(2) {
        q /= 2;
        a += 1;
    }
    while q.is_multiple_of(5) {
        q /= 5;
        b += 1;
    }
    (q == 1).then_some(a.max(b))
}

fn render(r: Rat, st: Style) -> String {
    let sign = if r.p < 0 || (r.p == 0 && st.neg_zero) {
        "-"
    } else {
        ""
    };
    let int_text = |n: u128| {
        let d = n.to_string();
        if st.commas {
            group(&d)
        } else {
            format!("{}{d}", "0".repeat(st.leading_zeros))
        }
    };
    let abs = u128::from(r.p.unsigned_abs());
    let places = decimal_places(r.q);
    match (st.form, places) {
        (2, Some(k)) => {
            let pow = 10u128.pow(k);
            let n = abs * (pow / u128::from(r.q));
            let (int, frac) = (n / pow, n % pow);
            let mut frac = if k == 0 {
                String::new()
            } else {
                format!("{frac:0width$}", width = k as usize)
            };
            frac.push_str(&"0".repeat(st.extra_zeros));
            let dollar = if st.dollar { "$" } else { "" };
            let int = if int == 0 && st.bare_point && !frac.is_empty() {
                String::new()
            } else {
                int_text(int)
            };
            if frac.is_empty() {
                format!("{sign}{dollar}{int}")
            } else {
                format!("{sign}{dollar}{int}.{frac}")
            }
        }
        (1, _) => {
            let m = u128::from(st.scale);
            format!("{sign}{}/{}", int_text(abs * m), u128::from(r.q) * m)
        }
        _ => format!("{sign}{}/{}", int_text(abs), r.q),
    }
}

fn rat() -> impl Strategy<Value = Rat> {
    let q = prop_oneof![
        // Denominators with a finite decimal expansion, so the decimal form is exercised.
        (0u32..12, 0u32..8).prop_map(|(a, b)| 2u64.pow(a) * 5u64.pow(b)),
        1u64..1_000_000,
    ];
    (-1_000_000_000_000i64..1_000_000_000_000, q).prop_map(|(p, q)| Rat { p, q })
}

fn style() -> impl Strategy<Value = Style> {
    (
        0u8..3,
        1u64..1000,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0usize), 1usize..4],
        prop_oneof![3 => Just(0usize), 1 => 1usize..3],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(form, scale, commas, dollar, extra_zeros, leading_zeros, bare_point, neg_zero)| {
                Style {
                    form,
                    scale,
                    commas,
                    dollar,
                    extra_zeros,
                    leading_zeros,
                    bare_point,
                    neg_zero,
                }
            },
        )
}

/// Two values: the same one (the checker must see through the rendering), a neighbour, or
/// an unrelated one.
fn pair() -> impl Strategy<Value = (Rat, Rat)> {
    prop_oneof![
        2 => rat().prop_map(|r| (r, r)),
        1 => (rat(), -3i64..=3).prop_map(|(r, d)| (r, Rat { p: r.p + d, q: r.q })),
        1 => (rat(), rat()),
    ]
}

/// Text around the number, from any Unicode, that cannot start a continuation.
fn filler() -> impl Strategy<Value = String> {
    "\\PC{0,30}".prop_filter("no invented question", |s| !s.contains("Question:"))
}

/// Adversarial text: Unicode, long digit runs, separator storms, the markers themselves.
fn adversarial() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        "\\PC{0,20}",
        "[0-9]{1,3000}",
        "[0-9]{1,3}(,[0-9]{3}){0,200}",
        "[,./$ -]{1,12}",
        "[-$]?[0-9]{0,40}[./][0-9]{0,40}",
        Just("Question:".to_string()),
        Just("####".to_string()),
        "[٠-٩０-９]{1,5}",
    ];
    prop::collection::vec(fragment, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn never_panics_on_adversarial_text(s in adversarial(), t in adversarial()) {
        let _ = cut_continuation(&s);
        let _ = extract_ground_truth(&t);
        let answer = extract_response_answer(&s);
        for truth in [t.as_str(), "#### 42", s.as_str()] {
            if let Ok(v) = check_answer(&s, truth) {
                prop_assert!(v == 0.0 || v == 1.0);
            }
        }
        let contexts = [AnswerContext::new(t.clone()), AnswerContext::new("#### 7")];
        let samples: Vec<_> = contexts.iter().map(|c| Sample::new("", s.as_str(), c)).collect();
        match AnswerChecker.score(&samples) {
            Ok(v) => prop_assert_eq!(v.len(), 2),
            Err(e) => prop_assert!(extract_ground_truth(&t).is_none(), "{}", e),
        }
        if let Some(a) = answer {
            prop_assert_eq!(check_answer(&s, &format!("#### {a}")).ok(), Some(1.0));
        }
    }

    #[test]
    fn agrees_with_the_rational_oracle(
        (x, y) in pair(),
        (sx, sy) in (style(), style()),
        before in filler(),
        after in "( apples| dollars|\\.|!|\\?|%| |)[ a-zA-Z!?]{0,12}",
        marked in any::<bool>(),
    ) {
        let written = render(x, sx);
        let response = format!("{before} {written}{after}");
        let truth = if marked {
            format!("steps 1 + 2 = 3\n#### {}", render(y, sy))
        } else {
            render(y, sy)
        };
        let want = if x.oracle_eq(y) { 1.0 } else { 0.0 };
        prop_assert_eq!(check_answer(&response, &truth).ok(), Some(want), "{} vs {}", response, truth);
        let ctx = AnswerContext::new(truth.clone());
        prop_assert_eq!(
            AnswerChecker.score(&[Sample::new("Q", &response, &ctx)]).ok(),
            Some(vec![want])
        );
        // The canonical answer keeps the value.
        let canonical = extract_response_answer(&response);
        prop_assert!(canonical.is_some(), "{}", response);
        let canonical = canonical.unwrap_or_default();
        prop_assert_eq!(check_answer(&canonical, &truth).ok(), Some(want));
        prop_assert_eq!(check_answer(&canonical, &format!("#### {written}")).ok(), Some(1.0));
    }

}

proptest! {
    #![proptest_config(config(2000))]

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
            let d = group(&n.unsigned_abs().to_string());
            if n < 0 { format!("-{d}") } else { d }
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

/// The renderer itself, on hand-checked cases, so that an oracle bug cannot hide a checker bug.
#[test]
fn renderer_writes_what_it_should() {
    let st = Style {
        form: 2,
        scale: 1,
        commas: true,
        dollar: true,
        extra_zeros: 1,
        leading_zeros: 0,
        bare_point: false,
        neg_zero: false,
    };
    assert_eq!(render(Rat { p: -12345, q: 4 }, st), "-$3,086.250");
    assert_eq!(
        render(
            Rat { p: 1, q: 8 },
            Style {
                bare_point: true,
                dollar: false,
                extra_zeros: 0,
                ..st
            }
        ),
        ".125"
    );
    assert_eq!(render(Rat { p: 2, q: 3 }, st), "2/3", "no finite decimal");
    assert_eq!(
        render(
            Rat { p: -1000, q: 3 },
            Style {
                form: 1,
                scale: 7,
                ..st
            }
        ),
        "-7,000/21"
    );
    assert_eq!(
        render(
            Rat { p: 0, q: 5 },
            Style {
                form: 0,
                commas: false,
                leading_zeros: 2,
                neg_zero: true,
                ..st
            }
        ),
        "-000/5"
    );
    assert_eq!(decimal_places(80), Some(4));
    assert_eq!(decimal_places(1), Some(0));
    assert_eq!(decimal_places(6), None);
}
