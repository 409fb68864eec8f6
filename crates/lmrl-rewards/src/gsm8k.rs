//! The GSM8K answer checker: reward 1.0 when the response's final number equals the ground
//! truth after `####`, else 0.0 (the exact-match rule of the CORY paper's GSM8K experiments).
//!
//! Rules (each chosen to be predictable and documented in `docs/rewards.md`):
//! - **Continuations**: the response is first cut at its first `"Question:"` (case-sensitive):
//!   a policy that keeps generating often invents a new "Question: … Answer: …" pair, and the
//!   invented answer must not count. The last number *before* the cut is the answer.
//! - **Numbers**: ASCII digits only (`'０'`–`'９'`, Arabic-Indic and other Unicode digits are not
//!   numbers, so a model cannot be rewarded for digits the tokenizer/grader would not show as
//!   such). A number is an optional sign `-` (only when not preceded by a letter or digit, so
//!   `3-4` reads as 3 and 4), an optional `$`, digits with optional thousands separators
//!   (`1,234,567`: a comma followed by exactly three digits), an optional decimal part
//!   (`2.50`; a trailing `.` is punctuation), or a fraction `3/4` (non-zero denominator).
//!   `.5` (a point right after a space, sign or `$`) is 0.5. Units and punctuation around the
//!   number are ignored (`9 apples.` → 9, `50%` → 50). No scientific notation.
//! - **Comparison**: exact rational equality on arbitrary-precision integers
//!   (`n₁·d₂ = n₂·d₁`), so `0.75 = 3/4`, `1,000 = 1000.00`, `-0 = 0`, and numbers far beyond
//!   i64/f64 compare exactly without overflow.
use num_bigint::{BigInt, BigUint, Sign};

use crate::{AnswerContext, Reward, RewardError, Sample};

/// Marker after which a GSM8K solution states its final answer.
pub(crate) const ANSWER_MARKER: &str = "####";
/// Where an invented follow-up question starts; the response is cut there.
pub(crate) const CONTINUATION_MARKER: &str = "Question:";

/// An exact rational number parsed from text: `num / den` with `den > 0`, not reduced (so no
/// structural equality: `1/2` and `2/4` differ as fields but are equal values).
#[derive(Debug, Clone)]
pub(crate) struct Number {
    num: BigInt,
    den: BigInt,
    /// Canonical text: `-`?int(`.`frac)? or `-`?num`/`den.
    canonical: String,
}

impl Number {
    /// Exact equality of the two rationals by cross-multiplication. Not `num_rational::Ratio`:
    /// its equality either reduces by a binary gcd or compares continued fractions recursively,
    /// both far slower on long digit runs than one product (see `docs/rewards.md`).
    pub(crate) fn value_eq(&self, other: &Number) -> bool {
        &self.num * &other.den == &other.num * &self.den
    }
}

/// All numbers of `text`, in order of appearance (see the module docs for what counts).
pub(crate) fn find_numbers(text: &str) -> Vec<Number> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < b.len() {
        let starts_digit = b[i].is_ascii_digit();
        let starts_point = b[i] == b'.'
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
            && (i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'-' | b'$' | b'(' | b'='));
        if !(starts_digit || starts_point) {
            i += 1;
            continue;
        }
        // Sign: a '-' right before the number (optionally "-$"), not glued to a word/number.
        let mut negative = false;
        let mut s = i;
        if s > 0 && b[s - 1] == b'$' {
            s -= 1;
        }
        if s > 0 && b[s - 1] == b'-' {
            let before = if s >= 2 { b[s - 2] } else { b' ' };
            negative = !before.is_ascii_alphanumeric() && before != b'.';
        }
        let (num, end) = parse_at(b, i);
        let number = match num {
            Some((int, frac, den)) => make_number(negative, &int, &frac, den.as_deref()),
            None => None,
        };
        if let Some(n) = number {
            out.push(n);
        }
        i = end.max(i + 1);
    }
    out
}

/// Parses digits (with thousands separators), an optional decimal part or fraction, starting
/// at byte `i` (a digit, or a '.' followed by a digit). Returns (int digits, fraction digits,
/// denominator digits) and the end offset.
#[allow(clippy::type_complexity)]
fn parse_at(b: &[u8], mut i: usize) -> (Option<(String, String, Option<String>)>, usize) {
    let mut int = String::new();
    while i < b.len() {
        if b[i].is_ascii_digit() {
            int.push(b[i] as char);
            i += 1;
        } else if b[i] == b','
            && !int.is_empty()
            && b.len() >= i + 4
            && b[i + 1..i + 4].iter().all(u8::is_ascii_digit)
            && !b.get(i + 4).is_some_and(u8::is_ascii_digit)
        {
            i += 1; // thousands separator
        } else {
            break;
        }
    }
    let mut frac = String::new();
    if i < b.len() && b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            frac.push(b[i] as char);
            i += 1;
        }
        return (Some((int, frac, None)), i);
    }
    if !int.is_empty()
        && i < b.len()
        && b[i] == b'/'
        && b.get(i + 1).is_some_and(u8::is_ascii_digit)
    {
        let mut j = i + 1;
        let mut den = String::new();
        while j < b.len() && b[j].is_ascii_digit() {
            den.push(b[j] as char);
            j += 1;
        }
        if den.bytes().any(|d| d != b'0') {
            return (Some((int, frac, Some(den))), j);
        }
    }
    (Some((int, frac, None)), i)
}

fn strip_leading_zeros(s: &str) -> &str {
    let t = s.trim_start_matches('0');
    if t.is_empty() { "0" } else { t }
}

fn make_number(negative: bool, int: &str, frac: &str, den: Option<&str>) -> Option<Number> {
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let int = strip_leading_zeros(int);
    let frac = frac.trim_end_matches('0');
    let (num, den_digits, body) = match den {
        Some(d) => {
            let d = strip_leading_zeros(d);
            (int.to_string(), d.to_string(), format!("{int}/{d}"))
        }
        None => {
            let num = strip_leading_zeros(&format!("{int}{frac}")).to_string();
            let den = format!("1{}", "0".repeat(frac.len()));
            let body = if frac.is_empty() {
                int.to_string()
            } else {
                format!("{int}.{frac}")
            };
            (num, den, body)
        }
    };
    let negative = negative && num != "0";
    let canonical = if negative { format!("-{body}") } else { body };
    // The parser only collects ASCII digits, so these parses cannot fail; `?` keeps that an
    // invariant of the parser rather than a panic here.
    let sign = if negative { Sign::Minus } else { Sign::Plus };
    let num = BigInt::from_biguint(sign, BigUint::parse_bytes(num.as_bytes(), 10)?);
    let den = BigInt::parse_bytes(den_digits.as_bytes(), 10)?;
    Some(Number {
        num,
        den,
        canonical,
    })
}

/// Cuts `response` at its first invented follow-up question (see the module docs).
pub fn cut_continuation(response: &str) -> &str {
    match response.find(CONTINUATION_MARKER) {
        Some(p) => &response[..p],
        None => response,
    }
}

/// The final answer of a model response: the last number before any invented
/// `"Question:"`, in canonical form; `None` when there is no number.
pub fn extract_response_answer(response: &str) -> Option<String> {
    response_number(response).map(|n| n.canonical)
}

fn response_number(response: &str) -> Option<Number> {
    find_numbers(cut_continuation(response)).pop()
}

/// The ground-truth answer of a GSM8K solution: the first number after the last `####`
/// (a bare answer such as `"1,000"` without a marker is accepted too). `None` if none.
pub fn extract_ground_truth(solution: &str) -> Option<String> {
    ground_truth_number(solution).map(|n| n.canonical)
}

fn ground_truth_number(solution: &str) -> Option<Number> {
    let tail = match solution.rfind(ANSWER_MARKER) {
        Some(p) => &solution[p + ANSWER_MARKER.len()..],
        None => solution,
    };
    find_numbers(tail).into_iter().next()
}

/// 1.0 when the response's final number equals the ground truth exactly, else 0.0.
/// A ground truth without any number is an error (it is the dataset's fault, not the model's).
pub fn check_answer(response: &str, solution: &str) -> Result<f32, RewardError> {
    let truth = ground_truth_number(solution).ok_or_else(|| {
        RewardError::Input(format!(
            "ground truth {solution:?} contains no number after ####"
        ))
    })?;
    Ok(match response_number(response) {
        Some(n) if n.value_eq(&truth) => 1.0,
        _ => 0.0,
    })
}

/// The unbiased pass@k estimator of Chen et al. (2021, "Evaluating Large Language Models
/// Trained on Code", eq. 1): `1 − C(n−c, k) / C(n, k)` for `n` samples of which `c` are
/// correct, computed as a stable product `1 − Π_{i=n−c+1}^{n} (1 − k/i)`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Result<f64, RewardError> {
    if k == 0 || k > n || c > n {
        return Err(RewardError::Input(format!(
            "pass@k needs 1 ≤ k ≤ n and c ≤ n, got n={n}, c={c}, k={k}"
        )));
    }
    if n - c < k {
        return Ok(1.0);
    }
    let prod: f64 = ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product();
    Ok(1.0 - prod)
}

/// The GSM8K reward: 1.0 when a response's final number (before any invented `Question:`)
/// equals its sample's ground truth exactly, else 0.0 (see the module docs for the rules).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnswerChecker;

impl Reward<AnswerContext> for AnswerChecker {
    fn name(&self) -> &str {
        "gsm8k"
    }

    /// A ground truth without any number is an error naming the sample: it is the dataset's
    /// fault, and scoring it 0.0 would hide that.
    fn score(&self, samples: &[Sample<'_, AnswerContext>]) -> Result<Vec<f32>, RewardError> {
        samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                check_answer(s.response, &s.context.answer).map_err(|e| match e {
                    RewardError::Input(msg) => RewardError::Input(format!("sample {i}: {msg}")),
                    other => other,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ans(s: &str) -> Option<String> {
        extract_response_answer(s)
    }

    #[test]
    fn ground_truth_forms() {
        assert_eq!(
            extract_ground_truth("so 5+5=10\n#### 10").as_deref(),
            Some("10")
        );
        assert_eq!(extract_ground_truth("#### 1,000").as_deref(), Some("1000"));
        assert_eq!(
            extract_ground_truth("#### $1,234.50").as_deref(),
            Some("1234.5")
        );
        assert_eq!(extract_ground_truth("#### -7").as_deref(), Some("-7"));
        assert_eq!(extract_ground_truth("#### 3/4").as_deref(), Some("3/4"));
        assert_eq!(
            extract_ground_truth("a #### 1 #### 2").as_deref(),
            Some("2")
        );
        assert_eq!(extract_ground_truth("#### none"), None);
    }

    #[test]
    fn response_extraction() {
        assert_eq!(
            ans("She has 3 apples and buys 6, so 9 apples.").as_deref(),
            Some("9")
        );
        assert_eq!(ans("The answer is $1,000.").as_deref(), Some("1000"));
        assert_eq!(ans("It costs -$5").as_deref(), Some("-5"));
        assert_eq!(ans("pages 3-4").as_deref(), Some("4"));
        assert_eq!(ans("x = -0.50").as_deref(), Some("-0.5"));
        assert_eq!(ans("-0").as_deref(), Some("0"));
        assert_eq!(ans("007 agents").as_deref(), Some("7"));
        assert_eq!(ans("it is .5 now").as_deref(), Some("0.5"));
        assert_eq!(ans("half: 1/2.").as_deref(), Some("1/2"));
        assert_eq!(ans("5/0").as_deref(), Some("0"));
        assert_eq!(ans("50%").as_deref(), Some("50"));
        assert_eq!(ans("1,2,3").as_deref(), Some("3"));
        assert_eq!(ans("12,3456").as_deref(), Some("3456"));
        assert_eq!(ans("no digits here"), None);
        assert_eq!(ans("full-width ４２ and arabic ٤٢"), None);
        assert_eq!(ans("").as_deref(), None);
    }

    #[test]
    fn continuation_is_cut() {
        let r = "Tom has 5. The answer is 5.\n\nQuestion: Ann has 3 cats. Answer: 3";
        assert_eq!(ans(r).as_deref(), Some("5"));
        assert_eq!(ans("Question: 4"), None);
    }

    #[test]
    fn exact_comparison() {
        assert_eq!(check_answer("so 0.75", "#### 3/4").ok(), Some(1.0));
        assert_eq!(check_answer("6/8", "#### 0.75").ok(), Some(1.0));
        assert_eq!(
            check_answer("1000.00 dollars", "#### 1,000").ok(),
            Some(1.0)
        );
        assert_eq!(check_answer("-0", "#### 0").ok(), Some(1.0));
        assert_eq!(check_answer("7", "#### -7").ok(), Some(0.0));
        assert_eq!(check_answer("0.3333", "#### 1/3").ok(), Some(0.0));
        let big = "123456789012345678901234567890123456789";
        assert_eq!(check_answer(big, &format!("#### {big}")).ok(), Some(1.0));
        assert_eq!(
            check_answer(&format!("{big}1"), &format!("#### {big}")).ok(),
            Some(0.0)
        );
        let long = "9".repeat(400);
        assert_eq!(
            check_answer(&format!("{long}.0"), &format!("#### {long}")).ok(),
            Some(1.0)
        );
        assert!(check_answer("5", "no answer").is_err());
    }

    #[test]
    fn big_fractions_reduce_exactly() {
        // 999999999999 · 1000000001 = 1000000000998999999999, so the fraction is an integer.
        assert_eq!(
            check_answer("1000000000998999999999/1000000001", "#### 999999999999").ok(),
            Some(1.0)
        );
        assert_eq!(
            check_answer("1000000000998999999998/1000000001", "#### 999999999999").ok(),
            Some(0.0)
        );
        // 123456789123456789 · 987654321987654321 = 121932631356500531347203169112635269.
        assert_eq!(
            check_answer(
                "= 121932631356500531347203169112635269/987654321987654321",
                "#### 123,456,789,123,456,789"
            )
            .ok(),
            Some(1.0)
        );
        assert_eq!(
            check_answer("-1/3", "#### -2/6").ok(),
            Some(1.0),
            "signs compare"
        );
        assert_eq!(check_answer("-1/3", "#### 1/3").ok(), Some(0.0));
    }

    #[test]
    fn pass_at_k_estimator() {
        assert_eq!(pass_at_k(5, 0, 1).ok(), Some(0.0));
        assert_eq!(pass_at_k(5, 5, 3).ok(), Some(1.0));
        // n=10, c=3, k=1: c/n.
        assert!((pass_at_k(10, 3, 1).unwrap_or(f64::NAN) - 0.3).abs() < 1e-12);
        // n=4, c=1, k=2: 1 − C(3,2)/C(4,2) = 1 − 3/6.
        assert!((pass_at_k(4, 1, 2).unwrap_or(f64::NAN) - 0.5).abs() < 1e-12);
        // n − c < k → certain.
        assert_eq!(pass_at_k(4, 3, 2).ok(), Some(1.0));
        assert!(pass_at_k(3, 1, 4).is_err());
        assert!(pass_at_k(3, 4, 1).is_err());
        assert!(pass_at_k(3, 1, 0).is_err());
    }

    #[test]
    fn checker_reads_each_samples_own_answer() {
        let (a, b) = (
            AnswerContext::new("12"),
            AnswerContext::new("steps\n#### 3/4"),
        );
        let r: Box<dyn Reward<AnswerContext>> = Box::new(AnswerChecker);
        assert_eq!(r.name(), "gsm8k");
        // The same prompt twice with different answers: only the context decides.
        let s = r
            .score(&[
                Sample::new("Q", "so 12 eggs", &a),
                Sample::new("Q", "0.75", &b),
                Sample::new("Q", "11\n\nQuestion: x? Answer: 12", &a),
            ])
            .expect("valid answers");
        assert_eq!(s, [1.0, 1.0, 0.0]);
        let bad = AnswerContext::new("#### x");
        let err = r
            .score(&[Sample::new("Q", "1", &a), Sample::new("Q", "1", &bad)])
            .expect_err("no number in the ground truth");
        assert!(err.to_string().contains("sample 1"), "{err}");
        assert!(r.score(&[]).expect("empty batch").is_empty());
    }
}
