//! The per-job control token: its Secret, created once, refused loudly when unusable.

use super::*;

/// The token a job's token Secret holds: its `token` key, non-empty. Anything else is refused
/// loudly — an empty token would talk to runtime pods that accept anyone.
pub(super) fn token_in(secret: &Secret, name: &str) -> Result<String> {
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get(TOKEN_KEY))
        .map(|t| String::from_utf8_lossy(&t.0).trim().to_string())
        .unwrap_or_default();
    if token.is_empty() {
        return Err(Error::TokenSecret {
            secret: name.to_string(),
            key: TOKEN_KEY,
        });
    }
    Ok(token)
}

/// The job's token Secret is unusable: nothing is created or contacted without a token; the
/// StreamJob says why (`Ready`/`Stalled` conditions, a Warning Event) until someone fixes it.
pub(super) async fn token_secret_invalid<E: Engine>(
    job: &StreamJob,
    ctx: &Context<E>,
    jobs: &Api<StreamJob>,
    why: &str,
) -> Result<Requeue> {
    ctx.metrics.error("token_secret");
    tracing::warn!(job = %job.name_any(), %why, "token Secret unusable");
    let mut status = job.status.clone().unwrap_or_default();
    let before = status.clone();
    let now = ctx.clock.now();
    let generation = job.metadata.generation;
    for (type_, ok) in [("Ready", false), ("Stalled", true)] {
        decide::set_condition(
            &mut status.conditions,
            type_,
            ok,
            "TokenSecretInvalid",
            why,
            generation,
            now,
        );
    }
    status.message = Some(why.to_string());
    if status != before {
        publish(ctx, job, true, "TokenSecretInvalid", why).await;
        let version = job.metadata.resource_version.as_deref();
        write_status(jobs, &job.name_any(), version, &status).await?;
    }
    // The operator does not watch Secrets: look again soon.
    Ok(Requeue::requeue(Duration::from_secs(30)))
}

/// The job's control token: read from its Secret, created with a random token if missing.
pub(super) async fn ensure_token<E: Engine>(ctx: &Context<E>, owner: &Owner) -> Result<String> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let name = crate::objects::names::token_secret_name(&owner.name);
    if let Some(s) = secrets.get_opt(&name).await? {
        return token_in(&s, &name);
    }
    let token: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(40)
        .map(char::from)
        .collect();
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match secrets
        .create(&pp, &objects::token_secret(owner, &token))
        .await
    {
        Ok(_) => Ok(token),
        Err(kube::Error::Api(e)) if e.code == 409 => token_in(&secrets.get(&name).await?, &name),
        Err(e) => Err(e.into()),
    }
}
