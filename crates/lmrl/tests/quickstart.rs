//! The quickstart example's training on a tiny random Llama: two PPO iterations give finite
//! statistics, change the policy, and leave a directory that loads back with its tokenizer.
use lmrl::prelude::*;

#[path = "../examples/ppo_quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

#[test]
fn two_ppo_iterations_train_the_tiny_llama_and_save_it_with_its_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let (initial, trained) = (dir.path().join("tiny"), dir.path().join("trained"));
    quickstart::tiny_checkpoint(&initial).unwrap();
    let log = quickstart::train(&initial, 2, &trained).unwrap();
    assert_eq!(log.len(), 2);
    for (reward, stats) in &log {
        assert!((0.0..=1.0).contains(reward), "reward {reward}");
        assert!(
            stats.kl.is_finite() && stats.entropy.is_finite(),
            "{stats:?}"
        );
        assert!(stats.policy_loss.is_finite(), "{stats:?}");
        assert!(stats.value_loss.is_some_and(f32::is_finite), "{stats:?}");
        assert!(stats.response_len_mean >= 1.0 && stats.response_len_mean <= 16.0);
    }
    assert!(
        log[1].1.kl != 0.0,
        "the second rollout comes from an updated policy"
    );

    let device = Device::flex();
    let before = AutoLm::from_pretrained(&initial, &device)
        .unwrap()
        .hf_tensors();
    let after = AutoLm::from_pretrained(&trained, &device)
        .unwrap()
        .hf_tensors();
    assert_eq!(before.len(), after.len());
    let changed = before
        .iter()
        .zip(&after)
        .filter(|((_, a), (_, b))| a.data != b.data)
        .count();
    assert!(changed > 0, "PPO changed the policy's weights");

    let (tok0, tok1) = (
        LmTokenizer::load_for_model(&initial).unwrap(),
        LmTokenizer::load_for_model(&trained).unwrap(),
    );
    let text = quickstart::PROMPTS[0].0;
    assert_eq!(tok1.encode(text).unwrap(), tok0.encode(text).unwrap());
    assert_eq!(tok1.eos_token_ids(), tok0.eos_token_ids());
}
