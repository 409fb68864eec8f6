//! LoRA against PEFT (tests/fixtures/lora-peft, made by its `make_fixture.py`): PEFT's saved
//! adapters load onto the tiny checkpoints and give PEFT's logits and PEFT's gradients of every
//! `lora_A`/`lora_B`; saving them again writes PEFT's tensors bit for bit.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Gradients;
use burn::tensor::{Device, Int, Tensor, TensorData};
use lmrl_models::{
    ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, AutoLm, CausalLm, LoraConfig, Pretrained, TensorMap,
    load_peft_adapter, lora_parameter_count, merge_lora, read_peft_config, save_peft_adapter,
};
use serde_json::Value;

/// PEFT computes in float32 too; the sums run in a different order.
const TOL: f32 = 1e-5;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixture("lora-peft/expected.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

fn floats(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(a) => a.iter().flat_map(floats).collect(),
        Value::Number(n) => vec![n.as_f64().expect("number") as f32],
        other => panic!("not a number: {other}"),
    }
}

fn max_diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "sizes differ");
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

fn ids(case: &Value, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>) {
    let rows: Vec<Vec<i64>> = serde_json::from_value(case["input_ids"].clone()).expect("ids");
    let (b, s) = (rows.len(), rows[0].len());
    let flat: Vec<i64> = rows.concat();
    let ids = Tensor::from_data(TensorData::new(flat, [b, s]), device);
    let mask = Tensor::ones([b, s], device);
    (ids, mask)
}

/// The gradient of every adapter factor under PEFT's name, in PEFT's layout.
struct FactorGrads<'a> {
    model: &'a AutoLm,
    grads: &'a Gradients,
    path: Vec<String>,
    out: HashMap<String, Vec<f32>>,
}

impl ModuleVisitor for FactorGrads<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let [.., weight, lora, factor] = self.path.as_slice() else {
            return;
        };
        if weight != "weight" || lora != "lora" {
            return;
        }
        let module = self.path[..self.path.len() - 3].join(".");
        let name = match factor.as_str() {
            "a" => "lora_A",
            _ => "lora_B",
        };
        let key = format!("{}.{name}.weight", self.model.hf_module_name(&module));
        let grad = param
            .val()
            .grad(self.grads)
            .expect("adapters get gradients");
        let grad: Tensor<2> = Tensor::from_data(grad.into_data(), &Device::flex());
        let t = grad
            .transpose()
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        self.out.insert(key, t);
    }
}

#[test]
fn peft_adapters_give_pefts_logits_and_gradients() {
    let all = expected();
    let device = Device::flex().autodiff();
    for name in ["llama-tiny", "gpt2-tiny"] {
        let case = &all[name];
        let base = AutoLm::from_pretrained(&fixture(name), &device).expect("load");
        let dir = fixture(&format!("lora-peft/{name}-adapter"));
        let (model, config) = load_peft_adapter(base, &dir).expect("adapter");
        assert!(lora_parameter_count(&model) > 0);
        let (ids, mask) = ids(case, &device);
        let logits = model.forward_simple(ids, mask).logits;
        let got = logits.clone().into_data().try_to_vec::<f32>().expect("f32");
        let d = max_diff(&got, &floats(&case["logits"]));
        assert!(d <= TOL, "{name}: logits differ from PEFT's by {d}");
        eprintln!("{name}: max |logit - PEFT's| {d:.1e}");

        let loss = logits.powi_scalar(2).mean();
        let grads = loss.backward();
        let mut visitor = FactorGrads {
            model: &model,
            grads: &grads,
            path: Vec::new(),
            out: HashMap::new(),
        };
        model.visit(&mut visitor);
        let want = case["grads"].as_object().expect("grads");
        assert_eq!(visitor.out.len(), want.len(), "{name}: factors");
        let mut worst = 0.0f32;
        for (key, g) in want {
            let ours = visitor
                .out
                .get(key)
                .unwrap_or_else(|| panic!("{name}: no {key}"));
            let g = floats(g);
            // Gradients of a mean are small: held to TOL relative to the factor's largest.
            let scale = g.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            assert!(
                scale > 0.0,
                "{name}: {key} has a zero gradient in the fixture"
            );
            let d = max_diff(ours, &g) / scale;
            assert!(
                d <= TOL,
                "{name}: gradient of {key} differs by {d} (relative)"
            );
            worst = worst.max(d);
        }
        eprintln!(
            "{name}: max |gradient - PEFT's| / max |PEFT's| over {} factors {worst:.1e}",
            want.len()
        );
        if name == "gpt2-tiny" {
            assert!(config.rslora, "the gpt2 case covers rsLoRA's scale");
        }
    }
}

#[test]
fn saved_adapters_are_pefts_files() {
    let device = Device::flex();
    for name in ["llama-tiny", "gpt2-tiny"] {
        let src = fixture(&format!("lora-peft/{name}-adapter"));
        let base = AutoLm::from_pretrained(&fixture(name), &device).expect("load");
        let (model, config) = load_peft_adapter(base.clone(), &src).expect("adapter");
        let out = std::env::temp_dir().join(format!("lmrl-peft-{name}-{}", std::process::id()));
        save_peft_adapter(&model, &config, Some(name), &out).expect("save");
        let read = |d: &Path| {
            let f = d.join(ADAPTER_WEIGHTS_FILE);
            TensorMap::from_safetensors(&f).expect("read").tensors
        };
        let (theirs, ours) = (read(&src), read(&out));
        assert_eq!(ours.len(), theirs.len(), "{name}: tensor count");
        for (k, t) in &theirs {
            let o = &ours[k];
            assert_eq!(o.shape, t.shape, "{name}: {k}");
            assert!(o.data == t.data, "{name}: {k} not bit-identical");
        }
        let again = read_peft_config(&out.join(ADAPTER_CONFIG_FILE)).expect("config");
        assert!(
            again.same_adapters(&config),
            "{name}: {again:?} vs {config:?}"
        );
        // The merged model is the adapted one.
        let (ids, mask) = ids(&expected()[name], &device);
        let adapted = model.forward_simple(ids.clone(), mask.clone()).logits;
        let merged = merge_lora(model).forward_simple(ids, mask).logits;
        let d = max_diff(
            &adapted.into_data().try_to_vec::<f32>().expect("f32"),
            &merged.into_data().try_to_vec::<f32>().expect("f32"),
        );
        assert!(d <= TOL, "{name}: merged differs by {d}");
        std::fs::remove_dir_all(&out).ok();
    }
}

#[test]
fn bad_adapter_configs_are_refused_by_field() {
    let dir = std::env::temp_dir().join(format!("lmrl-peft-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let src = fixture("lora-peft/llama-tiny-adapter/adapter_config.json");
    let good: Value =
        serde_json::from_str(&std::fs::read_to_string(src).expect("read")).expect("json");
    for (field, value) in [
        ("use_dora", Value::Bool(true)),
        ("r", Value::from(0)),
        ("peft_type", Value::from("IA3")),
        ("target_modules", Value::from("all-linear")),
    ] {
        let mut v = good.clone();
        v[field] = value;
        let f = dir.join(ADAPTER_CONFIG_FILE);
        std::fs::write(&f, v.to_string()).expect("write");
        let err = read_peft_config(&f).expect_err(field).to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
    // A target module the model does not have.
    let base = AutoLm::from_pretrained(&fixture("llama-tiny"), &Device::flex()).expect("load");
    let cfg = LoraConfig::new(2, 4.0, &["c_attn"]);
    assert!(lmrl_models::apply_lora(base, &cfg).is_err());
    std::fs::remove_dir_all(&dir).ok();
}
