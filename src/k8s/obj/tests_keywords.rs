//! The sweep of upstream's documented builder keywords: each builder in
//! `upstream_keywords.txt` exists, and both the builder and `kite check` accept each of
//! its keywords.

use super::ALL;
use super::tests::{CANDIDATES, base_with, call, eval};

const UPSTREAM: &str = include_str!("upstream_keywords.txt");

/// `(builder, keyword)` for every keyword upstream documents.
pub(crate) fn upstream() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for line in UPSTREAM.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (builder, keywords) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("upstream_keywords.txt: no ':' in {line:?}"));
        for kw in keywords.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            out.push((builder.trim(), kw));
        }
    }
    out
}

#[test]
fn the_list_is_read() {
    let all = upstream();
    assert!(all.len() > 250, "only {} keywords read", all.len());
    assert!(all.contains(&("volume", "pvc")));
    assert!(all.contains(&("mutating_admission_policy_binding", "match_resources")));
}

#[test]
fn every_upstream_builder_exists_and_declares_its_keywords() {
    let mut missing = Vec::new();
    for (builder, kw) in upstream() {
        match ALL.iter().find(|b| b.name == builder) {
            None => missing.push(format!("builder k8s.obj.{builder}")),
            Some(b) if !b.keywords.contains(&kw) => {
                missing.push(format!("k8s.obj.{builder}: keyword {kw:?}"));
            }
            Some(_) => {}
        }
    }
    assert!(missing.is_empty(), "missing: {missing:#?}");
}

#[test]
fn every_upstream_keyword_is_accepted_by_a_call() {
    let mut refused = Vec::new();
    for (builder, kw) in upstream() {
        let base = base_with(builder, kw);
        let mut accepted = false;
        for value in CANDIDATES {
            let code = call(builder, &base, kw, value);
            match eval(&code) {
                Ok(_) => accepted = true,
                Err(e) if e.contains("unknown keyword") || e.contains("has no attribute") => {
                    refused.push(format!("k8s.obj.{builder}({kw} = ...): {e}"));
                    break;
                }
                Err(_) => {}
            }
        }
        if !accepted {
            refused.push(format!(
                "k8s.obj.{builder}: no plausible value for {kw:?} was accepted"
            ));
        }
    }
    assert!(refused.is_empty(), "refused: {refused:#?}");
}

#[test]
fn refusals_list_each_accepted_keyword_once() {
    let e = eval(r#"obj.cluster_role_binding("b", role = "r", rol = 1)"#).unwrap_err();
    assert!(e.contains("did you mean \"role\""), "{e}");
}
