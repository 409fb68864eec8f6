//! The rows of `metrics.csv`: what one learner's step, or one CORY iteration, puts in the run's
//! metrics (TRL's logged quantities), and the collapse indicator of the sampled texts.
use lmrl_rl::{CoryIterationStats, Role, StepStats};
use lmrl_runs::MetricRow;

/// Mean over responses of 1 − distinct words / words (the collapse indicator of
/// [`MetricRow::repetition`]): 0 when no word repeats, near 1 for "great great great …".
pub fn repetition(responses: &[String]) -> f64 {
    let per: Vec<f64> = responses
        .iter()
        .map(|y| y.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let distinct: std::collections::BTreeSet<&str> = w.iter().copied().collect();
            1.0 - distinct.len() as f64 / w.len() as f64
        })
        .collect();
    per.iter().sum::<f64>() / per.len().max(1) as f64
}

/// Mean of `xs` in f64.
fn mean(xs: &[f32]) -> f64 {
    xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len().max(1) as f64
}

/// Bessel-corrected standard deviation (TRL's `reward_std`); `None` below two values.
fn std_dev(xs: &[f32]) -> Option<f64> {
    (xs.len() >= 2).then(|| {
        let m = mean(xs);
        let ss = xs.iter().map(|&x| (f64::from(x) - m).powi(2)).sum::<f64>();
        (ss / (xs.len() - 1) as f64).sqrt()
    })
}

/// One metrics row of a learner's step. `task` is the batch of the copy's own task rewards
/// (their mean and std go into the row; a group learner's `frac_reward_zero_std` is of the
/// scores it trained on);
/// `pioneer` its (reward, KL) answering the plain prompt when measured apart from its training
/// role (otherwise the training-role values are repeated). `combined_reward` is r − β·KL with
/// TRL's `objective/kl` and `objective/kl_coef`.
pub fn metric_row(
    it: usize,
    name: &str,
    role: &str,
    task: &[f32],
    s: &StepStats,
    pioneer: Option<(f64, f64)>,
) -> MetricRow {
    let task_mean = mean(task);
    let kl = f64::from(s.kl);
    let (ptr, pkl) = pioneer.unwrap_or((task_mean, kl));
    MetricRow {
        iteration: it,
        agent: name.into(),
        role: role.into(),
        task_reward: task_mean,
        kl,
        beta: s.kl_coef,
        combined_reward: task_mean - s.kl_coef * kl,
        policy_loss: f64::from(s.policy_loss),
        value_loss: f64::from(s.value_loss.unwrap_or(0.0)),
        entropy: f64::from(s.entropy),
        approxkl: f64::from(s.approxkl),
        clipfrac: f64::from(s.clipfrac),
        response_len: f64::from(s.response_len_mean),
        pioneer_task_reward: ptr,
        pioneer_kl: pkl,
        repetition: 0.0,
        reward_std: std_dev(task),
        frac_reward_zero_std: s.frac_reward_zero_std.map(f64::from),
        seconds: 0.0,
    }
}

/// The metrics rows of a CORY iteration, `[llm1, llm2]`: each copy's task reward is the batch
/// mean of its own responses' rewards in its training role; an observer's plain-query (pioneer
/// format) reward and KL fill the `pioneer_*` columns when the trainer measured them.
pub fn cory_rows(it: usize, stats: &CoryIterationStats) -> Vec<MetricRow> {
    let t = &stats.texts;
    stats
        .agents
        .iter()
        .map(|m| {
            let (own, role) = match m.role {
                Role::Pioneer => (&t.pioneer_rewards, "pioneer"),
                Role::Observer => (&t.observer_rewards, "observer"),
            };
            let plain = m
                .query_only_reward
                .zip(m.query_only_kl)
                .filter(|_| m.role == Role::Observer)
                .map(|(r, k)| (f64::from(r), f64::from(k)));
            metric_row(it, m.llm, role, own, &m.stats, plain)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_is_the_share_of_repeated_words() {
        let r = repetition(&["a b c d".into(), "great great great great".into()]);
        // 0 for the first, 1 − 1/4 for the second.
        assert!((r - 0.375).abs() < 1e-12, "{r}");
        assert_eq!(repetition(&[String::new()]), 0.0);
    }
}
