//! `#[kamaji_e2e::test]`: an `async fn` end-to-end test run on a thread of its own in a fresh
//! network namespace (kamaji-machine's private test network), on a two-worker tokio runtime.
//!
//! ```ignore
//! #[kamaji_e2e::test]
//! async fn a_tenant_reaches_available() {
//!     let env = kamaji_e2e::Env::start().await.unwrap();
//!     // …
//! }
//! ```
//!
//! expands to a `#[test] fn` that calls `kamaji_e2e::run_test(move || async move { … })`;
//! the body, its return type and its attributes (doc comments included) stay as written, and
//! a panic in the body fails the test as usual.

use proc_macro::TokenStream;
use quote::quote;
use syn::{ItemFn, parse_macro_input};

/// Runs an `async fn` test in the test's private network (see the crate docs).
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(
            proc_macro2::Span::call_site(),
            "#[kamaji_e2e::test] takes no arguments",
        )
        .to_compile_error()
        .into();
    }
    let mut f = parse_macro_input!(item as ItemFn);
    if f.sig.asyncness.is_none() {
        return syn::Error::new_spanned(f.sig.fn_token, "#[kamaji_e2e::test] needs an async fn")
            .to_compile_error()
            .into();
    }
    f.sig.asyncness = None;
    let attrs = &f.attrs;
    let vis = &f.vis;
    let sig = &f.sig;
    let body = &f.block;
    quote! {
        #[test]
        #(#attrs)*
        #vis #sig {
            ::kamaji_e2e::run_test(move || async move #body)
        }
    }
    .into()
}
