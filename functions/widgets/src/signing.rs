//! Invocation tokens for a dashboard: one signer guard (the active key checked and held `FOR
//! SHARE` once), and inside it one token per widget, signed off the async workers (one job per
//! core at a time across the process), at most `concurrency` of a dashboard queued at once. A
//! token that cannot be signed fails only its widget.
//!
//! The issuance runs as its own task, bounded by its budget: a client that goes away mid-way
//! never interrupts a statement inside the guard's transaction.

use std::time::Duration;

use futures::{StreamExt, stream};
use k2b_core::Core;
use k2b_core::auth::Actor;
use k2b_core::identity::invocation::{InvocationAuthority, InvocationRequest, build_claims};
use k2b_core::identity::{INVOCATION_TOKEN_TYPE, IdentityError, IssueOptions, Purpose};
use k2b_core::widgets::{DashboardWidget, widget_operation};
use tracing::Instrument;

/// The app id Core signs invocations as.
const CALLER_APP: &str = "core";

/// One token per widget (in order), or the guard's error.
pub(crate) async fn sign_all(
    core: &Core,
    actor: &Actor,
    widgets: Vec<DashboardWidget>,
    request_id: Option<String>,
    budget: Duration,
    concurrency: usize,
) -> Result<Vec<Result<String, IdentityError>>, IdentityError> {
    let core = core.clone();
    let authority = InvocationAuthority::from_actor(actor);
    tokio::spawn(
        async move {
            sign_in_guard(
                &core,
                authority,
                &widgets,
                request_id.as_deref(),
                budget,
                concurrency,
            )
            .await
        }
        .in_current_span(),
    )
    .await
    .map_err(|_| IdentityError::InvalidInvocation("signing task"))?
}

async fn sign_in_guard(
    core: &Core,
    authority: Option<InvocationAuthority>,
    widgets: &[DashboardWidget],
    request_id: Option<&str>,
    budget: Duration,
    concurrency: usize,
) -> Result<Vec<Result<String, IdentityError>>, IdentityError> {
    let options = IssueOptions::timeout(budget.as_secs_f64() * 1000.0);
    core.identity
        .with_active_signer(Purpose::Invocation, options, |scope| async move {
            let signer = scope.handle();
            let claims: Vec<_> = widgets
                .iter()
                .map(|widget| {
                    let authority = authority
                        .as_ref()
                        .ok_or(IdentityError::InvalidInvocation("authority"))?;
                    build_claims(
                        &scope.issuer,
                        &InvocationRequest {
                            target_app: &widget.app_id,
                            caller_app: CALLER_APP,
                            operation: &widget_operation(&widget.widget_id),
                            schema_hash: None,
                            authority,
                            request_id,
                            issued_at: None,
                            jti: None,
                        },
                    )
                })
                .collect();
            let tokens = stream::iter(claims)
                .map(|claims| {
                    let signer = signer.clone();
                    async move {
                        let claims = claims?;
                        k2b_core::cpu::run(move || signer.sign(INVOCATION_TOKEN_TYPE, &claims))
                            .await
                            .map_err(|_| IdentityError::InvalidInvocation("signing task"))?
                    }
                })
                .buffered(concurrency.max(1))
                .collect::<Vec<_>>()
                .await;
            (scope, Ok(tokens))
        })
        .await
}
