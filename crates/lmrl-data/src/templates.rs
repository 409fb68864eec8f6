//! Prompt templates of the CORY paper (arXiv 2410.06101, section 4) and of its reference code
//! (`imdb_train/cory.py`).

/// The 1-shot exemplar of the paper's GSM8K prompt (question and worked answer), verbatim.
pub const GSM8K_EXEMPLAR_QUESTION: &str = "Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?";
pub const GSM8K_EXEMPLAR_ANSWER: &str = "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9.";

/// Pioneer (and PPO baseline) prompt for GSM8K, paper §4:
/// `Question: <exemplar>\nAnswer: <exemplar answer>\nQuestion: {q}\nAnswer:`.
/// The question is trimmed; nothing follows the final `Answer:` (the model continues it).
pub fn gsm8k_pioneer_prompt(question: &str) -> String {
    format!(
        "Question: {GSM8K_EXEMPLAR_QUESTION}\nAnswer: {GSM8K_EXEMPLAR_ANSWER}\nQuestion: {}\nAnswer:",
        question.trim()
    )
}

/// Observer prompt for GSM8K: the pioneer prompt with `Reference: {pioneer response}` on its own
/// line before the final `Answer:` (paper §4; the line break is an assumption, the paper prints
/// the template without saying how the reference is separated). The pioneer response is
/// trimmed of surrounding whitespace, since a sampled continuation of `Answer:` starts with a
/// space.
pub fn gsm8k_observer_prompt(question: &str, pioneer_response: &str) -> String {
    format!(
        "Question: {GSM8K_EXEMPLAR_QUESTION}\nAnswer: {GSM8K_EXEMPLAR_ANSWER}\nQuestion: {}\nReference: {}\nAnswer:",
        question.trim(),
        pioneer_response.trim()
    )
}

/// IMDB observer prompt of `cory.py`, built where the observer's query is formed:
/// `'I can make this sentence "' + q_text + y1_text + '" more positive: ' + q_text`,
/// with ASCII double quotes as in the code (the paper's figure shows curly single quotes).
/// Nothing is trimmed: `y1_text` is the pioneer's decoded response verbatim, including any
/// `<|endoftext|>` it kept, exactly as the reference builds the string.
pub fn imdb_observer_prompt(query: &str, pioneer_response: &str) -> String {
    format!("I can make this sentence \"{query}{pioneer_response}\" more positive: {query}")
}
