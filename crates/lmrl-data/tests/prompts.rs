//! IMDB prompt builder (determinism, length distribution, filtering), split, and templates.

use lmrl_data::{
    PromptConfig, Review, Sentiment, build_prompts, gsm8k_observer_prompt, gsm8k_pioneer_prompt,
    imdb_observer_prompt, strip_html_breaks, train_test_split,
};

/// Byte-level stand-in for a BPE tokenizer: one id per byte.
fn enc_bytes(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}
fn dec_bytes(ids: &[u32]) -> String {
    String::from_utf8_lossy(&ids.iter().map(|&i| i as u8).collect::<Vec<u8>>()).into_owned()
}

/// Word-level stand-in: ids are word lengths + 1000 * index, decode re-reads the words.
fn words_of(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

fn review(i: usize, len: usize) -> Review {
    let mut text = format!("review {i}: ");
    while text.len() < len {
        text.push_str("lorem ipsum dolor ");
    }
    Review {
        text: text[..len].to_string(),
        label: Some(if i.is_multiple_of(2) {
            Sentiment::Positive
        } else {
            Sentiment::Negative
        }),
    }
}

#[test]
fn prompts_are_deterministic_and_seed_dependent() {
    let reviews: Vec<Review> = (0..300).map(|i| review(i, 250)).collect();
    let cfg = PromptConfig::ppo_reference();
    let a = build_prompts(&reviews, &cfg, &enc_bytes, &dec_bytes).unwrap();
    let b = build_prompts(&reviews, &cfg, &enc_bytes, &dec_bytes).unwrap();
    assert_eq!(a, b);
    let c = build_prompts(
        &reviews,
        &PromptConfig {
            seed: 124,
            ..cfg.clone()
        },
        &enc_bytes,
        &dec_bytes,
    )
    .unwrap();
    let lens =
        |p: &[lmrl_data::ImdbPrompt]| p.iter().map(|x| x.input_ids.len()).collect::<Vec<_>>();
    assert_ne!(lens(&a), lens(&c));
    for p in &a {
        // The query is the decoded prefix of the review.
        assert!(reviews[p.review_index].text.starts_with(&p.query));
        assert_eq!(p.input_ids, enc_bytes(&p.query));
        assert_eq!(p.label, reviews[p.review_index].label);
    }
}

#[test]
fn prompt_lengths_are_uniform_2_to_7() {
    let reviews: Vec<Review> = (0..12_000).map(|i| review(i, 210)).collect();
    let prompts = build_prompts(
        &reviews,
        &PromptConfig::ppo_reference(),
        &enc_bytes,
        &dec_bytes,
    )
    .unwrap();
    assert_eq!(prompts.len(), reviews.len());
    let mut counts = [0usize; 9];
    for p in &prompts {
        counts[p.input_ids.len()] += 1;
    }
    assert_eq!(counts[0] + counts[1] + counts[8], 0, "{counts:?}");
    // 12000 draws over 6 values: expected 2000 each, sd ~ 41; allow 5 sd.
    for (n, &c) in counts.iter().enumerate().take(8).skip(2) {
        assert!((1800..=2200).contains(&c), "n={n}: {c} ({counts:?})");
    }
}

#[test]
fn length_filter_matches_reference_thresholds() {
    // Characters, not bytes: 'é' is 2 bytes but 1 character, as Python's len.
    let long_accented = "é".repeat(150);
    let reviews = vec![
        review(0, 200), // not > 200: dropped by ppo, kept by cory
        review(1, 201), // kept by both
        review(2, 100), // dropped by both
        review(3, 101), // kept by cory only
        Review {
            text: long_accented,
            label: None,
        }, // 150 chars, 300 bytes: cory only
    ];
    let ppo = build_prompts(
        &reviews,
        &PromptConfig::ppo_reference(),
        &enc_bytes,
        &dec_bytes,
    )
    .unwrap();
    let idx: Vec<usize> = ppo.iter().map(|p| p.review_index).collect();
    assert_eq!(idx, vec![1]);
    let cory = build_prompts(
        &reviews,
        &PromptConfig::cory_reference(),
        &enc_bytes,
        &dec_bytes,
    )
    .unwrap();
    let idx: Vec<usize> = cory.iter().map(|p| p.review_index).collect();
    assert_eq!(idx, vec![0, 1, 3, 4]);
}

#[test]
fn word_tokenizer_and_br_stripping() {
    let text = "<br /><br />Great   fun.<br /><br />Really great, and long enough to pass the filter of one hundred characters easily.";
    let reviews = vec![Review {
        text: text.into(),
        label: None,
    }];
    let enc = |s: &str| -> Vec<u32> { (0..words_of(s).len() as u32).collect() };
    let words: Vec<String> = words_of(&strip_html_breaks(text))
        .into_iter()
        .map(String::from)
        .collect();
    let dec = |ids: &[u32]| -> String {
        ids.iter()
            .map(|&i| words[i as usize].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let cfg = PromptConfig {
        min_tokens: 4,
        max_tokens: 4,
        ..PromptConfig::cory_reference()
    };
    let p = build_prompts(&reviews, &cfg, &enc, &dec).unwrap();
    assert_eq!(p[0].query, "Great fun. Really great,");
    assert_eq!(p[0].input_ids.len(), 4);
}

#[test]
fn strip_br_rules() {
    assert_eq!(strip_html_breaks("a.<br /><br />b"), "a. b");
    assert_eq!(strip_html_breaks("a. <br /> <br/> b"), "a. b");
    assert_eq!(strip_html_breaks("<br />start"), "start");
    assert_eq!(strip_html_breaks("end<br /><br />"), "end");
    assert_eq!(strip_html_breaks("x<br>y"), "x y");
    assert_eq!(strip_html_breaks("no tags"), "no tags");
    assert_eq!(strip_html_breaks("émoji 😀<br />ok"), "émoji 😀 ok");
}

#[test]
fn invalid_length_bounds_rejected() {
    let cfg = PromptConfig {
        min_tokens: 5,
        max_tokens: 4,
        ..PromptConfig::default()
    };
    assert!(build_prompts(&[], &cfg, &enc_bytes, &dec_bytes).is_err());
}

#[test]
fn split_is_deterministic_disjoint_and_order_preserving() {
    let items: Vec<usize> = (0..1000).collect();
    let (tr, te) = train_test_split(items.clone(), 0.2, 7).unwrap();
    assert_eq!((tr.len(), te.len()), (800, 200));
    let (tr2, te2) = train_test_split(items.clone(), 0.2, 7).unwrap();
    assert_eq!((&tr, &te), (&tr2, &te2));
    let (_, te3) = train_test_split(items.clone(), 0.2, 8).unwrap();
    assert_ne!(te, te3);
    assert!(tr.windows(2).all(|w| w[0] < w[1]));
    assert!(te.windows(2).all(|w| w[0] < w[1]));
    let mut all: Vec<usize> = tr.iter().chain(te.iter()).copied().collect();
    all.sort();
    assert_eq!(all, items);
    assert!(train_test_split(items.clone(), 1.5, 0).is_err());
    let (tr, te) = train_test_split(items, 0.0, 0).unwrap();
    assert_eq!((tr.len(), te.len()), (1000, 0));
}

#[test]
fn gsm8k_templates_exact() {
    let pioneer = gsm8k_pioneer_prompt(" What is 2 + 3? ");
    assert_eq!(
        pioneer,
        "Question: Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?\nAnswer: Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9.\nQuestion: What is 2 + 3?\nAnswer:"
    );
    let observer = gsm8k_observer_prompt("What is 2 + 3?", " 2 + 3 = 5.\n");
    assert_eq!(
        observer,
        "Question: Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?\nAnswer: Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9.\nQuestion: What is 2 + 3?\nReference: 2 + 3 = 5.\nAnswer:"
    );
    // The observer prompt is the pioneer prompt with one line inserted before the final Answer:.
    let cut = pioneer.rfind("Answer:").unwrap();
    assert_eq!(
        observer,
        format!(
            "{}Reference: 2 + 3 = 5.\n{}",
            &pioneer[..cut],
            &pioneer[cut..]
        )
    );
}

#[test]
fn imdb_observer_template_exact() {
    assert_eq!(
        imdb_observer_prompt("This movie", " was great<|endoftext|>"),
        "I can make this sentence \"This movie was great<|endoftext|>\" more positive: This movie"
    );
}
