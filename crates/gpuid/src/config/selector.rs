//! Syntax check of Kubernetes label selectors, so a typo in
//! `LABEL_SELECTOR` fails at start-up with the other configuration errors
//! instead of as a 400 from the first LIST (upstream parsed it only after
//! the exporter had started).
//!
//! The grammar is apimachinery's `labels.Parse`: comma-separated
//! requirements `key`, `!key`, `key=value`, `key==value`, `key!=value`,
//! `key in (a,b)`, `key notin (a,b)`, and `key>N` / `key<N`.

/// `Ok` when `raw` is a valid selector, else what is wrong with it.
pub fn check_label_selector(raw: &str) -> Result<(), String> {
    for term in split_outside_parentheses(raw)? {
        check_requirement(term.trim())?;
    }
    Ok(())
}

fn split_outside_parentheses(raw: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (at, c) in raw.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                terms.push(&raw[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_owned());
    }
    terms.push(&raw[start..]);
    Ok(terms)
}

fn check_requirement(term: &str) -> Result<(), String> {
    if term.is_empty() {
        return Err("empty requirement (check for a stray comma)".to_owned());
    }
    if let Some(key) = term.strip_prefix('!') {
        return check_key(key.trim());
    }
    let key_end = term
        .find(|c: char| c.is_whitespace() || "=!<>(".contains(c))
        .unwrap_or(term.len());
    let (key, rest) = term.split_at(key_end);
    check_key(key)?;
    let rest = rest.trim_start();
    if rest.is_empty() {
        return Ok(());
    }
    for operator in ["==", "!=", "="] {
        if let Some(value) = rest.strip_prefix(operator) {
            return check_value(value.trim());
        }
    }
    for operator in [">", "<"] {
        if let Some(value) = rest.strip_prefix(operator) {
            let value = value.trim();
            return value
                .parse::<i64>()
                .map(|_| ())
                .map_err(|_| format!("{key}{operator}{value}: '{operator}' needs an integer"));
        }
    }
    for operator in ["notin", "in"] {
        if let Some(set) = rest.strip_prefix(operator)
            && (set.starts_with('(') || set.starts_with(char::is_whitespace))
        {
            return check_set(key, operator, set.trim());
        }
    }
    Err(format!(
        "unexpected {rest:?} after key {key:?} (use =, ==, !=, in, notin)"
    ))
}

fn check_set(key: &str, operator: &str, set: &str) -> Result<(), String> {
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("{key} {operator}: values must be in parentheses"))?;
    if inner.trim().is_empty() {
        return Err(format!(
            "{key} {operator} (): the set of values cannot be empty"
        ));
    }
    inner
        .split(',')
        .try_for_each(|value| check_value(value.trim()))
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("a requirement has no key".to_owned());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "key {key:?} has an invalid prefix (a DNS subdomain)"
        ));
    }
    if !is_label_name(name) {
        return Err(format!(
            "key {key:?} is invalid (at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)"
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "value {value:?} is invalid (at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)"
        ))
    }
}

fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn is_dns_subdomain(prefix: &str) -> bool {
    prefix.len() <= 253
        && prefix.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
                && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

#[cfg(test)]
mod tests {
    use super::check_label_selector;

    #[test]
    fn every_requirement_form_of_the_kubernetes_grammar_is_accepted() {
        for selector in [
            "app=nvidia-device-plugin-daemonset",
            "app==x",
            "app!=x",
            "app",
            "!app",
            "app in (a, b)",
            "app notin (a,b)",
            "app in(a)",
            "tier=",
            "example.com/role=gpu, env in (prod,staging), !legacy",
            "gen>3",
            "gen < 10",
        ] {
            assert_eq!(check_label_selector(selector), Ok(()), "{selector}");
        }
    }

    #[test]
    fn malformed_selectors_are_rejected_with_the_reason() {
        for (selector, reason) in [
            ("app=a,", "empty requirement"),
            ("app=a b", "value \"a b\" is invalid"),
            ("app in a,b", "parentheses"),
            ("app in ()", "cannot be empty"),
            ("app in (a", "unbalanced"),
            ("Example.com/x=1", "invalid prefix"),
            ("-app=1", "key \"-app\" is invalid"),
            ("gen>x", "needs an integer"),
            ("app ~ x", "unexpected"),
            ("=x", "no key"),
        ] {
            let error = check_label_selector(selector).unwrap_err();
            assert!(error.contains(reason), "{selector}: {error}");
        }
    }
}
