//! A word-level tokenizer, and a model saved together with its tokenizer in one call: the
//! directory loads back into the same weights and the same tokenizer.
use burn::tensor::Device;
use lmrl_models::{AutoLm, LlamaConfig, LmTokenizer, ModelConfig, Pretrained};

const WORDS: [&str; 6] = ["<unk>", "<pad>", "</s>", "hello", "world", "."];

fn tiny_llama(vocab: usize, device: &Device) -> AutoLm {
    let config = LlamaConfig::plain(vocab, 16, 32, 1, 2, 1, 32);
    AutoLm::init(&ModelConfig::Llama(config), device)
}

#[test]
fn word_level_ids_are_list_positions_and_unknown_words_map_to_the_first() {
    let tok = LmTokenizer::word_level(&WORDS, Some("</s>"), Some("<pad>")).unwrap();
    assert_eq!(
        tok.encode("hello world. goodbye").unwrap(),
        vec![3, 4, 5, 0]
    );
    assert_eq!(tok.decode(&[3, 4, 2]).unwrap(), "hello world </s>");
    assert_eq!(tok.vocab_size(), 6);
    assert_eq!(
        (tok.eos_token_ids(), tok.pad_token_id(), tok.bos_token_id()),
        (vec![2], Some(1), None)
    );
    for (words, eos) in [
        (&["a", "b", "a"][..], None),
        (&[][..], None),
        (&["a", "b"][..], Some("c")),
    ] {
        assert!(
            LmTokenizer::word_level(words, eos, None).is_err(),
            "{words:?} {eos:?}"
        );
    }
}

#[test]
fn saved_with_its_tokenizer_the_directory_loads_back_whole() {
    let device = Device::flex();
    device.seed(3);
    let model = tiny_llama(WORDS.len(), &device);
    let tok = LmTokenizer::word_level(&WORDS, Some("</s>"), Some("<pad>")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("policy");
    model.save_pretrained_with_tokenizer(&tok, &out).unwrap();
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(out.join(file).is_file(), "{file} written");
    }
    let back = AutoLm::from_pretrained(&out, &device).unwrap();
    let (a, b) = (model.hf_tensors(), back.hf_tensors());
    assert_eq!(a.len(), b.len());
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!((na, &ta.shape, &ta.data), (nb, &tb.shape, &tb.data));
    }
    let tok_back = LmTokenizer::load_for_model(&out).unwrap();
    let text = "world hello . hello";
    assert_eq!(tok_back.encode(text).unwrap(), tok.encode(text).unwrap());
    assert_eq!(tok_back.eos_token_ids(), vec![2]);
    assert_eq!(tok_back.pad_token_id(), Some(1));
}

#[test]
fn a_tokenizer_larger_than_the_vocabulary_is_refused_before_writing() {
    let device = Device::flex();
    let model = tiny_llama(WORDS.len() - 1, &device);
    let tok = LmTokenizer::word_level(&WORDS, None, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("policy");
    let err = model
        .save_pretrained_with_tokenizer(&tok, &out)
        .unwrap_err();
    assert!(err.to_string().contains("6 ids"), "{err}");
    assert!(!out.exists(), "nothing written");
}
