//! Who may scrape the operator's `/metrics` when it is served beyond loopback (it lists
//! every tenant's controllers): a bearer token the API server authenticates
//! (TokenReview) and authorises for `get` on the non-resource URL `/metrics`
//! (SubjectAccessReview), as controller-runtime's secure metrics serving does.
//! Answers are cached for a minute, keyed by the token's SHA-256, in a bounded map.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::http::{GateFuture, Verdict};

/// How long an answer is reused.
const CACHE_FOR: Duration = Duration::from_mins(1);
/// The most cached answers (each a hash and a verdict); the map is emptied when full.
const CACHE_MAX: usize = 1024;
/// How long one review may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// The gate in front of `/metrics`.
pub struct MetricsAccess {
    client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], (Instant, Verdict)>>,
}

impl MetricsAccess {
    pub fn new(client: kube::Client) -> Self {
        MetricsAccess {
            client,
            cache: Mutex::default(),
        }
    }

    /// The verdict on `token`: who it is, and whether they may get `/metrics`.
    async fn review(&self, token: String) -> Verdict {
        let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, e);
        let review = TokenReview {
            spec: TokenReviewSpec {
                token,
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer =
            tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
                .await
                .map_err(|_| unavailable("authenticating the token: no answer in time".into()))?
                .map_err(|e| unavailable(format!("authenticating the token: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Err((StatusCode::UNAUTHORIZED, "the token is not valid".into()));
        };
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &sar))
            .await
            .map_err(|_| unavailable("authorising the scrape: no answer in time".into()))?
            .map_err(|e| unavailable(format!("authorising the scrape: {e}")))?;
        if answer.status.is_some_and(|s| s.allowed) {
            Ok(())
        } else {
            let who = user.username.unwrap_or_default();
            Err((StatusCode::FORBIDDEN, format!("{who} may not get /metrics")))
        }
    }
}

impl crate::http::MetricsGate for MetricsAccess {
    fn check(&self, bearer: Option<String>) -> GateFuture<'_> {
        Box::pin(async move {
            let Some(token) = bearer.filter(|t| !t.is_empty()) else {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    "/metrics needs a bearer token (Authorization: Bearer ...)".into(),
                ));
            };
            let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
            let mut key = [0; 32];
            key.copy_from_slice(digest.as_ref());
            if let Some((at, verdict)) = self.lock().get(&key)
                && at.elapsed() < CACHE_FOR
            {
                return verdict.clone();
            }
            let verdict = self.review(token).await;
            // Failures to ask are not remembered: the next scrape asks again.
            if !matches!(&verdict, Err((StatusCode::SERVICE_UNAVAILABLE, _))) {
                let mut cache = self.lock();
                if cache.len() >= CACHE_MAX {
                    cache.clear();
                }
                cache.insert(key, (Instant::now(), verdict.clone()));
            }
            verdict
        })
    }
}

impl MetricsAccess {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Instant, Verdict)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
