//! `uniffi-bindgen`, built apart from the native library so the library's builds stay fast.
fn main() {
    uniffi::uniffi_bindgen_main()
}
