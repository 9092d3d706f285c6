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
//!
//! `#[kamaji_e2e::test(shared)]` takes an `async fn name(env: &Env)` instead: the body runs in
//! the network of the suite's shared environment, which it is given
//! (`kamaji_e2e::shared::run_shared_test`, started by the first such test of the binary and
//! checked to be left as it was found after each one).
//!
//! ```ignore
//! #[kamaji_e2e::test(shared)]
//! async fn a_tenant_reaches_available(env: &Env) {
//!     env.f0_available("tenant-a", "demo", 1).await.unwrap();
//! }
//! ```

use proc_macro::TokenStream;
use quote::quote;
use syn::{ItemFn, parse_macro_input};

/// Runs an `async fn` test in the test's private network, or with `shared` in the suite's
/// shared environment (see the crate docs).
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    let shared = match attr.to_string().as_str() {
        "" => false,
        "shared" => true,
        _ => {
            return syn::Error::new(
                proc_macro2::Span::call_site(),
                "#[kamaji_e2e::test] takes no argument or `shared`",
            )
            .to_compile_error()
            .into();
        }
    };
    let mut f = parse_macro_input!(item as ItemFn);
    if f.sig.asyncness.is_none() {
        return syn::Error::new_spanned(f.sig.fn_token, "#[kamaji_e2e::test] needs an async fn")
            .to_compile_error()
            .into();
    }
    f.sig.asyncness = None;
    if shared {
        return shared_test(f);
    }
    if let Some(input) = f.sig.inputs.first() {
        return syn::Error::new_spanned(
            input,
            "#[kamaji_e2e::test] takes no parameters (or use `shared`)",
        )
        .to_compile_error()
        .into();
    }
    let body = &f.block;
    as_test(
        &f,
        &quote! { ::kamaji_e2e::run_test(move || async move #body) },
    )
}

/// `f` (made synchronous, its parameters taken) as a `#[test] fn` whose body is `call`.
fn as_test(f: &ItemFn, call: &proc_macro2::TokenStream) -> TokenStream {
    let attrs = &f.attrs;
    let vis = &f.vis;
    let sig = &f.sig;
    quote! {
        #[test]
        #(#attrs)*
        #vis #sig {
            #call
        }
    }
    .into()
}

/// `async fn name(env: &Env) { … }` → `#[test] fn name()` running the body with the shared
/// environment bound to the parameter's pattern.
fn shared_test(mut f: ItemFn) -> TokenStream {
    let param = match f.sig.inputs.iter().collect::<Vec<_>>().as_slice() {
        [syn::FnArg::Typed(p)] => (*p.pat).clone(),
        _ => {
            return syn::Error::new_spanned(
                &f.sig.inputs,
                "#[kamaji_e2e::test(shared)] needs exactly one parameter, `env: &Env`",
            )
            .to_compile_error()
            .into();
        }
    };
    f.sig.inputs.clear();
    let body = &f.block;
    let call = quote! {
        ::kamaji_e2e::shared::run_shared_test(move |shared_env| async move {
            let #param: &::kamaji_e2e::Env = &shared_env;
            #body
        })
    };
    as_test(&f, &call)
}
