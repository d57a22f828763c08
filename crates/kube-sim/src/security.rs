//! The pure rules of kube-sim's security defaults (docs/kube-sim.md,
//! "Security defaults"): which `Host` a request may name, how a bearer
//! token is read and compared, which paths an anonymous client may read,
//! and how a request maps onto the attributes RBAC decides on, with the
//! sentence kube-apiserver prints when it denies one. The middleware that
//! applies them is `http::auth`.

use axum::http::{HeaderMap, Method, Uri, header};
use subtle::ConstantTimeEq;

use crate::rbac::{Request, UserInfo};

/// Whether a `Host` header (or URI authority) names this machine's
/// loopback interface: `127.0.0.1`, `[::1]` or `localhost`, with or without
/// a port. Anything else is refused, so a web page whose DNS name an
/// attacker re-points at 127.0.0.1 (DNS rebinding) cannot reach kube-sim
/// from the victim's browser: the browser sends the attacker's name.
pub fn host_is_loopback(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[::1]` or `[::1]:6443`
        match rest.split_once(']') {
            Some((inside, after)) if after.is_empty() || is_port(after) => inside,
            _ => return false,
        }
    } else if host.matches(':').count() > 1 {
        // A bare IPv6 address (a port needs brackets).
        host
    } else {
        match host.split_once(':') {
            Some((name, port)) if is_port(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        }
    };
    name.eq_ignore_ascii_case("localhost")
        || name.eq_ignore_ascii_case("localhost.")
        || name == "127.0.0.1"
        || name == "::1"
}

/// `:digits`, a port suffix.
fn is_port(text: &str) -> bool {
    text.strip_prefix(':')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// The host a request names: its `Host` header, or (HTTP/2) the URI's
/// authority.
pub fn request_host<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| uri.authority().map(|authority| authority.as_str()))
}

/// What the `Authorization` header offers.
#[derive(Debug, PartialEq, Eq)]
pub enum Credential<'a> {
    None,
    Bearer(&'a str),
    /// Basic auth, another scheme, or a header that is not text: kube-sim
    /// authenticates none of them, so they are as good as a wrong token.
    Unusable,
}

pub fn credential(headers: &HeaderMap) -> Credential<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Credential::None;
    };
    let Ok(text) = value.to_str() else {
        return Credential::Unusable;
    };
    match text.trim().split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            let token = token.trim();
            if token.is_empty() {
                Credential::Unusable
            } else {
                Credential::Bearer(token)
            }
        }
        _ => Credential::Unusable,
    }
}

/// Compares a presented token with the admin token in time that does not
/// depend on where they first differ (only on the length, which is fixed
/// for a generated token).
pub fn token_matches(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// A new random admin token: 32 bytes from the operating system's CSPRNG
/// (through `rand`'s thread RNG, reseeded from it), hex-encoded.
pub fn generate_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Paths kube-apiserver's `system:public-info-viewer` ClusterRole lets
/// everyone `get`, signed in or not: health and the version.
const PUBLIC_INFO_PATHS: [&str; 5] = ["/livez", "/readyz", "/healthz", "/version", "/version/"];

/// Whether a request without credentials may be served: a GET (or HEAD)
/// of a public-info path, as on a kube-apiserver with anonymous requests
/// limited to them.
pub fn anonymous_may(method: &Method, path: &str) -> bool {
    (*method == Method::GET || *method == Method::HEAD) && PUBLIC_INFO_PATHS.contains(&path)
}

/// What kube-apiserver's bootstrap policy grants every authenticated user
/// (`system:discovery`, `system:basic-user`, `system:public-info-viewer`
/// bound to `system:authenticated`). kube-sim stores no bootstrap roles,
/// so these are built in rather than looked up.
pub fn granted_to_every_authenticated_user(request: &Request) -> bool {
    match request {
        Request::NonResource { verb, path } => {
            verb == "get"
                && (PUBLIC_INFO_PATHS.contains(&path.as_str())
                    || ["/openapi", "/api", "/apis"].contains(&path.as_str())
                    || ["/openapi/", "/api/", "/apis/"]
                        .iter()
                        .any(|prefix| path.starts_with(prefix)))
        }
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            ..
        } => {
            verb == "create"
                && subresource.is_empty()
                && match group.as_str() {
                    "authorization.k8s.io" => {
                        resource == "selfsubjectaccessreviews"
                            || resource == "selfsubjectrulesreviews"
                    }
                    "authentication.k8s.io" => resource == "selfsubjectreviews",
                    _ => false,
                }
        }
    }
}

/// The attributes RBAC decides on for an HTTP request, parsed the way
/// kube-apiserver's request-info factory does: `/api/v1/...` and
/// `/apis/<group>/<version>/...` with an optional `namespaces/<ns>/`, then
/// `resource[/name[/subresource]]`; everything else (and discovery) is a
/// non-resource request whose verb is the lowercase method.
pub fn request_attributes(method: &Method, uri: &Uri) -> Request {
    let path = uri.path();
    let non_resource = || Request::NonResource {
        verb: method.as_str().to_ascii_lowercase(),
        path: path.to_string(),
    };
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(crate::http::path::percent_decode)
        .collect();
    let (group, rest) = match segments.first().map(String::as_str) {
        Some("api") if segments.len() >= 3 => (String::new(), &segments[2..]),
        Some("apis") if segments.len() >= 4 => (segments[1].clone(), &segments[3..]),
        _ => return non_resource(),
    };
    let mut parts = rest;
    let mut watch_path = false;
    if parts.first().map(String::as_str) == Some("watch") {
        watch_path = true;
        parts = &parts[1..];
    }
    let mut namespace = String::new();
    if parts.first().map(String::as_str) == Some("namespaces") && parts.len() > 1 {
        namespace = parts[1].clone();
        // `namespaces/<name>/status` and `/finalize` are the namespace's own
        // subresources; anything else after the name is a namespaced resource.
        if parts.len() > 2 && parts[2] != "status" && parts[2] != "finalize" {
            parts = &parts[2..];
        }
    }
    if parts.is_empty() {
        return non_resource();
    }
    let resource = parts[0].clone();
    let name = parts.get(1).cloned().unwrap_or_default();
    let subresource = parts.get(2).cloned().unwrap_or_default();
    let watch_query = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .any(|(key, value)| key == "watch" && (value == "true" || value == "1"));
    let verb = match *method {
        Method::GET | Method::HEAD if watch_path || watch_query => "watch",
        Method::GET | Method::HEAD if name.is_empty() => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        _ => return non_resource(),
    };
    Request::Resource {
        verb: verb.to_string(),
        group,
        resource,
        subresource,
        name,
        namespace,
    }
}

/// The second check kube-apiserver makes for a request, if any: a
/// WebSocket exec, attach or port-forward opens with a GET (authorized as
/// `get`), and since Kubernetes 1.35 the upgrade also needs `create` on the
/// subresource.
pub fn also_required(request: &Request) -> Option<Request> {
    let Request::Resource {
        verb,
        group,
        resource,
        subresource,
        ..
    } = request
    else {
        return None;
    };
    let connects = verb == "get"
        && group.is_empty()
        && resource == "pods"
        && ["exec", "attach", "portforward"].contains(&subresource.as_str());
    connects.then(|| {
        let mut create = request.clone();
        if let Request::Resource { verb, .. } = &mut create {
            *verb = "create".into();
        }
        create
    })
}

/// The sentence kube-apiserver's authorization filter puts after
/// `<resource> is forbidden: ` (or `forbidden: `) when it denies `request`.
/// Like kube-apiserver, `&`, `<` and `>` are escaped so the message never
/// reads as HTML.
pub fn denial_sentence(user: &UserInfo, request: &Request) -> String {
    sentence(user, request)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn sentence(user: &UserInfo, request: &Request) -> String {
    let username = &user.username;
    match request {
        Request::NonResource { verb, path } => {
            format!("User {username:?} cannot {verb} path {path:?}")
        }
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            ..
        } => {
            let resource = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            if namespace.is_empty() {
                format!(
                    "User {username:?} cannot {verb} resource {resource:?} in API group {group:?} at the cluster scope"
                )
            } else {
                format!(
                    "User {username:?} cannot {verb} resource {resource:?} in API group {group:?} in the namespace {namespace:?}"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(method: Method, uri: &str) -> Request {
        request_attributes(&method, &uri.parse().unwrap())
    }

    fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        name: &str,
        namespace: &str,
    ) -> Request {
        Request::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            namespace: namespace.into(),
        }
    }

    #[test]
    fn only_loopback_host_names_are_accepted_with_any_port() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:6443",
            "localhost",
            "LOCALHOST:1",
            "localhost.:80",
            "[::1]",
            "[::1]:6443",
            "::1",
        ] {
            assert!(host_is_loopback(host), "{host} should be accepted");
        }
        for host in [
            "evil.example",
            "evil.example:6443",
            "127.0.0.1.nip.io",
            "localhost.evil.example",
            "127.0.0.2",
            "0.0.0.0:6443",
            "[::2]:1",
            "[::1]x",
            "localhost:",
            "localhost:http",
            "",
        ] {
            assert!(!host_is_loopback(host), "{host:?} should be refused");
        }
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            headers
        };
        assert_eq!(credential(&HeaderMap::new()), Credential::None);
        assert_eq!(credential(&with("Bearer abc")), Credential::Bearer("abc"));
        assert_eq!(credential(&with("bearer  abc ")), Credential::Bearer("abc"));
        assert_eq!(credential(&with("Bearer ")), Credential::Unusable);
        assert_eq!(credential(&with("Basic YTpi")), Credential::Unusable);
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abc", "abd"));
        assert!(!token_matches("abc", "ab"));
        let token = generate_token();
        assert_eq!(token.len(), 64);
        assert_ne!(token, generate_token());
    }

    #[test]
    fn anonymous_clients_may_read_health_and_version_only() {
        for path in ["/livez", "/readyz", "/healthz", "/version"] {
            assert!(anonymous_may(&Method::GET, path), "{path}");
        }
        assert!(!anonymous_may(&Method::POST, "/healthz"));
        for path in ["/api", "/apis", "/metrics", "/sim/faults", "/api/v1/pods"] {
            assert!(!anonymous_may(&Method::GET, path), "{path}");
        }
    }

    #[test]
    fn requests_map_to_rbac_attributes_like_kube_apiservers_request_info() {
        assert_eq!(
            attributes(Method::GET, "/api/v1/namespaces/ns/pods"),
            resource("list", "", "pods", "", "", "ns")
        );
        assert_eq!(
            attributes(Method::GET, "/api/v1/namespaces/ns/pods?watch=true&rv=1"),
            resource("watch", "", "pods", "", "", "ns")
        );
        assert_eq!(
            attributes(Method::GET, "/api/v1/watch/namespaces/ns/pods/p"),
            resource("watch", "", "pods", "", "p", "ns")
        );
        assert_eq!(
            attributes(Method::GET, "/api/v1/pods"),
            resource("list", "", "pods", "", "", "")
        );
        assert_eq!(
            attributes(
                Method::PUT,
                "/apis/apps/v1/namespaces/ns/deployments/d/status"
            ),
            resource("update", "apps", "deployments", "status", "d", "ns")
        );
        let exec = attributes(Method::GET, "/api/v1/namespaces/ns/pods/p/exec?command=ls");
        assert_eq!(exec, resource("get", "", "pods", "exec", "p", "ns"));
        assert_eq!(
            also_required(&exec),
            Some(resource("create", "", "pods", "exec", "p", "ns"))
        );
        assert_eq!(
            also_required(&resource("get", "", "pods", "", "p", "ns")),
            None
        );
        assert_eq!(
            attributes(Method::GET, "/api/v1/namespaces/team"),
            resource("get", "", "namespaces", "", "team", "team")
        );
        assert_eq!(
            attributes(Method::PUT, "/api/v1/namespaces/team/finalize"),
            resource("update", "", "namespaces", "finalize", "team", "team")
        );
        assert_eq!(
            attributes(
                Method::DELETE,
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aa"
            ),
            resource(
                "delete",
                "rbac.authorization.k8s.io",
                "clusterroles",
                "",
                "system:a",
                ""
            )
        );
        assert_eq!(
            attributes(Method::DELETE, "/api/v1/namespaces/ns/configmaps"),
            resource("deletecollection", "", "configmaps", "", "", "ns")
        );
        for path in [
            "/api",
            "/api/v1",
            "/apis/apps/v1",
            "/version",
            "/sim/faults",
        ] {
            assert_eq!(
                attributes(Method::GET, path),
                Request::NonResource {
                    verb: "get".into(),
                    path: path.into()
                }
            );
        }
    }

    #[test]
    fn denials_read_as_kube_apiservers() {
        let sa = UserInfo::service_account("ns", "sa");
        assert_eq!(
            denial_sentence(&sa, &resource("list", "", "pods", "", "", "ns")),
            r#"User "system:serviceaccount:ns:sa" cannot list resource "pods" in API group "" in the namespace "ns""#
        );
        assert_eq!(
            denial_sentence(&sa, &resource("create", "", "pods", "exec", "p", "")),
            r#"User "system:serviceaccount:ns:sa" cannot create resource "pods/exec" in API group "" at the cluster scope"#
        );
        assert_eq!(
            denial_sentence(
                &sa,
                &Request::NonResource {
                    verb: "post".into(),
                    path: "/sim/faults".into()
                }
            ),
            r#"User "system:serviceaccount:ns:sa" cannot post path "/sim/faults""#
        );
    }

    #[test]
    fn every_authenticated_user_may_discover_and_ask_about_itself() {
        let get = |path: &str| Request::NonResource {
            verb: "get".into(),
            path: path.into(),
        };
        assert!(granted_to_every_authenticated_user(&get("/apis/apps/v1")));
        assert!(granted_to_every_authenticated_user(&get("/openapi/v3")));
        assert!(!granted_to_every_authenticated_user(&get("/metrics")));
        assert!(granted_to_every_authenticated_user(&resource(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "",
            "",
            ""
        )));
        assert!(!granted_to_every_authenticated_user(&resource(
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews",
            "",
            "",
            ""
        )));
    }
}
