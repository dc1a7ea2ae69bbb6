//! `#[locked(...)]`: hold a locksmith distributed lock for the body of an
//! async fn.
//!
//! Use it through the library's `macros` feature
//! (`redis-locksmith = { version = "0.1", features = ["macros"] }`), which
//! re-exports it as `locksmith::locked`:
//!
//! ```ignore
//! use locksmith::locked;
//!
//! #[locked("order:{user_id}", client = state.locks(), wait = "2s", lease = "10s")]
//! async fn place_order(state: &AppState, user_id: u64) -> Result<OrderId, AppError> {
//!     // runs while this process holds the lock "order:<user_id>"
//! }
//! ```
//!
//! Arguments:
//! - the lock name, a string literal formatted like `format!` from the fn's
//!   parameters (`{user_id}`, `{user_id:>08}`); every placeholder must name
//!   a parameter, checked at compile time;
//! - `client = <expr>` (required): the `locksmith::Client` to lock with,
//!   evaluated inside the fn, so it may use the parameters; anything that
//!   borrows as `&locksmith::Client` works (`state.locks()`, `&client`,
//!   an `Arc<Client>`);
//! - `wait = "<duration>"`: give up after this long (humantime syntax:
//!   `"500ms"`, `"2s"`); without it the fn waits for the lock forever;
//! - `lease = "<duration>"`: a fixed lease instead of the client's
//!   watchdog-renewed default;
//! - `busy = <expr>`: the error returned when `wait` elapses; without it,
//!   `locksmith::Error::Busy { name, waited }` (kind `ErrorKind::Busy`:
//!   the lock stayed held by another owner; Redis answered, nothing is
//!   held) converted with `From`.
//!
//! The fn must be `async` and return `Result<T, E>` with
//! `E: From<locksmith::Error>`: errors taking or releasing the lock are
//! converted with `?`. Each call takes its own lock handle, so two calls
//! exclude each other even inside one process. The body runs as an inner
//! async block; `return` and `?` inside it behave as usual. The lock is
//! released when the body finishes; if the release fails (notably
//! `NotHeld`: the lease ran out while the body ran, so exclusion was not
//! guaranteed; or `Unconfirmed`: the release's reply was lost and nothing
//! tells whether the lease lasted) and the body succeeded, the release
//! error is returned. If
//! the fn's future is dropped mid-body, the guard's `Drop` releases.
//!
//! The expansion names `::locksmith`, so the calling crate depends on the
//! library directly under its own name (the package `redis-locksmith`,
//! whose library is `locksmith`; do not rename the dependency).

use std::collections::HashSet;
use std::time::Duration;

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ItemFn, LitStr, Pat, ReturnType, Token};

/// Holds a locksmith lock, named from the fn's arguments, for the body of
/// an async fn. See the [crate documentation](crate) for the arguments.
#[proc_macro_attribute]
pub fn locked(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = match syn::parse::<Args>(args) {
        Ok(args) => args,
        Err(e) => return e.to_compile_error().into(),
    };
    let func = match syn::parse::<ItemFn>(item) {
        Ok(func) => func,
        Err(e) => return e.to_compile_error().into(),
    };
    match expand(args, func) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The parsed attribute arguments.
struct Args {
    /// The lock-name template, kept as the caller's token so `format!`
    /// resolves placeholders against the caller's parameters.
    name: LitStr,
    /// Evaluates to something that borrows as `&locksmith::Client`.
    client: Option<Expr>,
    /// Upper bound on waiting for the lock.
    wait: Option<(Duration, Span)>,
    /// Fixed lease.
    lease: Option<(Duration, Span)>,
    /// Error to return when `wait` elapses.
    busy: Option<Expr>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "expected the lock name: #[locked(\"order:{user_id}\", client = <expr>)]",
            ));
        }
        let name: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "the first argument must be the lock name as a string literal, \
                 e.g. #[locked(\"order:{user_id}\", client = <expr>)]",
            )
        })?;
        let mut args = Args {
            name,
            client: None,
            wait: None,
            lease: None,
            busy: None,
        };
        let mut seen = HashSet::new();
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            if !seen.insert(key.to_string()) {
                return Err(syn::Error::new(
                    key.span(),
                    format!("`{key}` is given twice"),
                ));
            }
            match key.to_string().as_str() {
                "client" => args.client = Some(input.parse()?),
                "busy" => args.busy = Some(input.parse()?),
                "wait" => args.wait = Some(parse_duration(input, false)?),
                "lease" => args.lease = Some(parse_duration(input, true)?),
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                        "unknown argument `{other}`: expected `client`, `wait`, `lease` or `busy`"
                    ),
                    ))
                }
            }
        }
        Ok(args)
    }
}

/// Parses `"2s"`-style durations at compile time, so a typo fails the build.
fn parse_duration(input: ParseStream<'_>, nonzero: bool) -> syn::Result<(Duration, Span)> {
    let lit: LitStr = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected a duration string such as \"500ms\" or \"5s\"",
        )
    })?;
    let duration = humantime::parse_duration(&lit.value()).map_err(|e| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid duration {:?}: {e} (use e.g. \"500ms\", \"5s\", \"1m\")",
                lit.value()
            ),
        )
    })?;
    if nonzero && duration.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            "the lease must be greater than zero",
        ));
    }
    Ok((duration, lit.span()))
}

/// The `{name}` placeholders of a format string (escaped `{{` skipped).
fn placeholders(template: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => return Err("unclosed `{` in the lock name".into()),
                    }
                }
                let name = inner.split(':').next().unwrap_or("").trim().to_owned();
                out.push(name);
            }
            '}' => return Err("unmatched `}` in the lock name (write `}}` for a brace)".into()),
            _ => {}
        }
    }
    Ok(out)
}

fn expand(args: Args, func: ItemFn) -> syn::Result<TokenStream2> {
    if func.sig.asyncness.is_none() {
        return Err(syn::Error::new(
            func.sig.fn_token.span(),
            "#[locked] can only be used on an `async fn`",
        ));
    }
    let ret = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.clone(),
        ReturnType::Default => {
            return Err(syn::Error::new(
                func.sig.ident.span(),
                "a #[locked] fn must return `Result<_, E>` where `E: From<locksmith::Error>`",
            ))
        }
    };
    let Some(client) = args.client else {
        return Err(syn::Error::new(
            args.name.span(),
            "missing `client = <expr>`: the locksmith::Client to take the lock with",
        ));
    };
    if args.busy.is_some() && args.wait.is_none() {
        return Err(syn::Error::new(
            args.busy.span(),
            "`busy` needs `wait`: without a wait bound the fn waits for the lock forever",
        ));
    }

    let params: HashSet<String> = func
        .sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(pat) => match &*pat.pat {
                Pat::Ident(ident) => Some(ident.ident.to_string()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect();
    let template = args.name.value();
    if template.is_empty() {
        return Err(syn::Error::new(args.name.span(), "the lock name is empty"));
    }
    for placeholder in placeholders(&template).map_err(|e| syn::Error::new(args.name.span(), e))? {
        if placeholder.is_empty() || placeholder.parse::<usize>().is_ok() {
            return Err(syn::Error::new(
                args.name.span(),
                "placeholders in the lock name must name a parameter, e.g. {user_id}",
            ));
        }
        if !params.contains(&placeholder) {
            return Err(syn::Error::new(
                args.name.span(),
                format!("`{{{placeholder}}}` in the lock name is not a parameter of this fn"),
            ));
        }
    }

    let name = &args.name;
    let span = name.span();
    let with_lease = args.lease.map(|(d, span)| {
        let nanos = d.as_nanos() as u64;
        quote_spanned! {span=>
            let __locksmith_lock = __locksmith_lock
                .with_lease(::core::time::Duration::from_nanos(#nanos))?;
        }
    });
    let acquire = match args.wait {
        None => quote_spanned! {span=> __locksmith_lock.lock().await? },
        Some((d, wait_span)) => {
            let nanos = d.as_nanos() as u64;
            let busy = match args.busy {
                Some(expr) => quote! { #expr },
                // A let with the lint allowed: converting into the fn's
                // error type is useless when that type is
                // `locksmith::Error` itself, which clippy would flag in
                // the caller's code.
                None => quote_spanned! {wait_span=>
                    {
                        #[allow(clippy::useless_conversion)]
                        let busy = ::core::convert::From::from(::locksmith::Error::Busy {
                            name: ::std::string::ToString::to_string(__locksmith_lock.name()),
                            waited: ::core::time::Duration::from_nanos(#nanos),
                        });
                        busy
                    }
                },
            };
            quote_spanned! {span=>
                match __locksmith_lock
                    .try_lock_for(::core::time::Duration::from_nanos(#nanos))
                    .await?
                {
                    ::core::option::Option::Some(guard) => guard,
                    ::core::option::Option::None => return ::core::result::Result::Err(#busy),
                }
            }
        }
    };

    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            let __locksmith_client: &::locksmith::Client = &(#client);
            let __locksmith_lock = __locksmith_client.lock(::std::format!(#name))?;
            #with_lease
            let __locksmith_guard = #acquire;
            let __locksmith_result: #ret = async #block.await;
            match __locksmith_guard.release().await {
                ::core::result::Result::Ok(()) => __locksmith_result,
                ::core::result::Result::Err(e) => match __locksmith_result {
                    ::core::result::Result::Ok(_) => {
                        ::core::result::Result::Err(::core::convert::From::from(e))
                    }
                    err @ ::core::result::Result::Err(_) => err,
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::placeholders;

    #[test]
    fn finds_placeholders_and_skips_escapes() {
        assert_eq!(
            placeholders("order:{user_id}:{{x}}:{n:>04}").unwrap(),
            vec!["user_id".to_owned(), "n".to_owned()]
        );
        assert!(placeholders("a{b").is_err());
        assert!(placeholders("a}b").is_err());
        assert!(placeholders("plain").unwrap().is_empty());
    }
}
