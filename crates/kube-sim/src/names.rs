//! Name, label and annotation rules of kube-apiserver, with its messages.
//! Pure functions: each returns the list of problems, empty when valid.

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// Which rule a kind applies to `metadata.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (namespaces).
    Label,
    /// RFC 1035 label (services).
    Dns1035,
    /// Any path segment (RBAC kinds, whose names such as
    /// `system:controller:foo` carry colons): not `.` or `..`, no `/` or `%`.
    PathSegment,
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if value.is_empty() || !value.split('.').all(is_dns_label_chars) {
        errs.push(SUBDOMAIN_MSG.to_string());
    }
    errs
}

// Subdomain parts are checked for characters and ends only; the whole-name
// length limit is separate, as in the real validator.
fn is_dns_label_chars(part: &str) -> bool {
    !part.is_empty()
        && part.chars().all(|c| is_lower_alnum(c) || c == '-')
        && part.starts_with(is_lower_alnum)
        && part.ends_with(is_lower_alnum)
}

pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns_label_chars(value) {
        errs.push(LABEL_MSG.to_string());
    }
    errs
}

pub fn dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let ok = !value.is_empty()
        && value.chars().all(|c| is_lower_alnum(c) || c == '-')
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && value.ends_with(is_lower_alnum);
    if !ok {
        errs.push(DNS1035_MSG.to_string());
    }
    errs
}

pub fn path_segment(value: &str) -> Vec<String> {
    if value == "." || value == ".." {
        return vec![format!("may not be '{value}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|bad| value.contains(bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

pub fn check_name(rule: NameRule, value: &str) -> Vec<String> {
    match rule {
        NameRule::Subdomain => dns1123_subdomain(value),
        NameRule::Label => dns1123_label(value),
        NameRule::Dns1035 => dns1035_label(value),
        NameRule::PathSegment => path_segment(value),
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A label or annotation key: `[prefix/]name`.
pub fn qualified_name(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else {
            errs.extend(
                dns1123_subdomain(prefix)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            errs.push("name part must be no more than 63 characters".to_string());
        }
        if !is_qualified_name_part(&name[..name.len().min(63)]) || name.contains('/') {
            errs.push(QUALIFIED_NAME_MSG.to_string());
        }
    }
    errs
}

pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_name_part(&value[..value.len().min(63)]) {
        errs.push(LABEL_VALUE_MSG.to_string());
    }
    errs
}

/// Total size limit kube-apiserver puts on all annotations of one object.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_accept_dotted_lowercase_names() {
        assert!(dns1123_subdomain("gpu-0.rack-1").is_empty());
        assert!(!dns1123_subdomain("Bad_Name").is_empty());
        assert!(!dns1123_subdomain("-leading").is_empty());
        assert!(!dns1123_subdomain("trailing.").is_empty());
        assert!(!dns1123_subdomain("").is_empty());
        assert_eq!(
            dns1123_subdomain(&"a".repeat(254)),
            vec!["must be no more than 253 characters".to_string()]
        );
    }

    #[test]
    fn labels_reject_dots_and_long_names() {
        assert!(dns1123_label("kube-system").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert!(!dns1123_label(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn dns1035_labels_must_start_with_a_letter() {
        assert!(dns1035_label("svc-1").is_empty());
        assert!(!dns1035_label("1svc").is_empty());
    }

    #[test]
    fn label_keys_may_carry_a_subdomain_prefix() {
        assert!(qualified_name("nvidia.com/gpu.product").is_empty());
        assert!(qualified_name("app").is_empty());
        assert!(!qualified_name("/app").is_empty());
        assert!(!qualified_name("Bad_Prefix/app").is_empty());
        assert!(!qualified_name("app-").is_empty());
        assert!(!qualified_name(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed() {
        assert!(label_value("").is_empty());
        assert!(label_value("NVIDIA-H100_80GB.v1").is_empty());
        assert!(!label_value("has space").is_empty());
        assert!(!label_value(&"x".repeat(64)).is_empty());
    }
}
