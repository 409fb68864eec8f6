//! Which groups a step trains on: DAPO's dynamic sampling (Yu et al. 2025, §3.2) with one
//! round of sampling.

/// Of the groups of `g` consecutive `scores`, the indices of the `keep` to train on,
/// ascending: every group whose rewards differ before any whose rewards are all equal (their
/// group-relative advantages are zero, so they add no gradient), each kind in data order.
pub fn informative_groups(scores: &[f32], g: usize, keep: usize) -> Vec<usize> {
    let g = g.max(1);
    let (mut informative, mut equal): (Vec<usize>, Vec<usize>) =
        (0..scores.len() / g).partition(|&k| !all_equal(&scores[k * g..(k + 1) * g]));
    informative.truncate(keep);
    equal.truncate(keep - informative.len());
    informative.extend(equal);
    informative.sort_unstable();
    informative
}

/// [`informative_groups`] as the indices of their samples (each group's `g`, ascending).
pub fn informative_samples(scores: &[f32], g: usize, keep: usize) -> Vec<usize> {
    let g = g.max(1);
    informative_groups(scores, g, keep)
        .into_iter()
        .flat_map(|k| k * g..(k + 1) * g)
        .collect()
}

/// The share of the groups of `g` consecutive `scores` whose rewards are all equal (TRL's
/// `frac_reward_zero_std`).
pub fn equal_reward_share(scores: &[f32], g: usize) -> f64 {
    let groups: Vec<&[f32]> = scores.chunks(g.max(1)).collect();
    let equal = groups.iter().filter(|s| all_equal(s)).count();
    equal as f64 / groups.len().max(1) as f64
}

fn all_equal(xs: &[f32]) -> bool {
    xs.windows(2).all(|w| w[0] == w[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_whose_rewards_differ_are_trained_on_first() {
        // Five groups of 2: equal, differ, equal, differ, differ.
        let s = [0., 0., 1., 0., 1., 1., 0., 2., 1., 0.];
        assert_eq!(informative_groups(&s, 2, 2), vec![1, 3]);
        assert_eq!(informative_groups(&s, 2, 3), vec![1, 3, 4]);
        // Too few differ: the first equal-reward groups fill up, in data order.
        assert_eq!(informative_groups(&s, 2, 4), vec![0, 1, 3, 4]);
        assert_eq!(informative_groups(&s, 2, 5), vec![0, 1, 2, 3, 4]);
        assert_eq!(informative_samples(&s, 2, 2), vec![2, 3, 6, 7]);
        assert!((equal_reward_share(&s, 2) - 0.4).abs() < 1e-12);
        assert_eq!(equal_reward_share(&[1., 1., 1.], 3), 1.0);
    }
}
