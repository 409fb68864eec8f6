//! Helpers shared by the integration tests; each test crate uses a different subset.
#![allow(dead_code)]
pub mod gguf_writer;

/// The backend the reference-parity tests run on: libtorch when the crate is built with its
/// `tch` feature (`scripts/test-backend.sh tch`), the CPU default otherwise.
pub fn backend_device() -> burn::tensor::Device {
    // burn 0.22 marks burn-tch deprecated in favour of its CubeCL backends; libtorch is still
    // the GPU route this workspace documents, so it is what these tests check.
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    return burn::tensor::Device::libtorch();
    #[cfg(not(feature = "tch"))]
    burn::tensor::Device::flex()
}
