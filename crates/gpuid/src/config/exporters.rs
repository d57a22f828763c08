//! Per-exporter settings. Malformed values of any exporter's knobs are
//! errors whichever exporter is selected (upstream silently fell back to
//! defaults); "required" is enforced only for the selected exporter.

use std::path::Path;
use std::time::Duration;

use super::knobs::{self, Knob};
use super::secret::Secret;
use super::source::Parser;
use super::values::{format_go_duration as go, is_http_url, parse_bool, parse_go_int};

const SECOND_NANOS: i128 = 1_000_000_000;

/// The `http` exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpExporterConfig {
    pub endpoint: String,
    pub timeout: Duration,
    pub auth_token: Option<Secret>,
    /// Extra headers from `HTTP_HEADERS`, in the order given.
    pub headers: Vec<HttpHeader>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpHeader {
    pub name: String,
    pub value: Secret,
}

/// Headers the exporter sets itself; overriding them would break the
/// protocol (framing, content type) or bypass the token knobs.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
];

pub(super) fn http(parser: &mut Parser<'_>, selected: bool) -> HttpExporterConfig {
    const WRAP: &str = "HTTP configuration validation failed";
    let endpoint = match parser.non_blank(&knobs::HTTP_ENDPOINT) {
        Some(setting) => {
            if !is_http_url(setting.value.trim()) {
                parser.reject(
                    &knobs::HTTP_ENDPOINT,
                    &setting,
                    format!("{WRAP}: HTTP endpoint must be a valid HTTP/HTTPS URL"),
                );
            }
            setting.value.trim().to_owned()
        }
        None => {
            if selected {
                parser.fail(
                    &knobs::HTTP_ENDPOINT,
                    format!("{WRAP}: HTTP endpoint URL is required"),
                );
            }
            String::new()
        }
    };
    let timeout = parser.duration(&knobs::HTTP_TIMEOUT, 30 * SECOND_NANOS);
    if timeout <= 0 {
        parser.violation(
            &knobs::HTTP_TIMEOUT,
            format!("{WRAP}: timeout must be positive, got {}", go(timeout)),
        );
    }
    let auth_token = parser.secret(&knobs::HTTP_AUTH_TOKEN, &knobs::HTTP_AUTH_TOKEN_FILE);
    let headers = match parser.non_blank(&knobs::HTTP_HEADERS) {
        Some(setting) => match parse_headers(&setting.value) {
            Ok(headers) => headers,
            Err(problem) => {
                parser.reject(&knobs::HTTP_HEADERS, &setting, problem);
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    HttpExporterConfig {
        endpoint,
        timeout: to_duration(timeout),
        auth_token,
        headers,
    }
}

/// `Name=value,Other=value`, the convention of `OTEL_EXPORTER_OTLP_HEADERS`.
/// Problems are described by entry position only: values may be secrets.
fn parse_headers(raw: &str) -> Result<Vec<HttpHeader>, String> {
    let mut headers: Vec<HttpHeader> = Vec::new();
    for (position, entry) in raw.split(',').enumerate() {
        let number = position + 1;
        let entry = entry.trim();
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!(
                "header entry {number} has no '=' (use Name=value,Other=value)"
            ));
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(format!("header entry {number} has an invalid header name"));
        }
        let value = value.trim();
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(format!(
                "header entry {number} has control characters in its value"
            ));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(format!(
                "header {name} is set by the exporter itself (use HTTP_AUTH_TOKEN or HTTP_AUTH_TOKEN_FILE for Authorization)"
            ));
        }
        if headers
            .iter()
            .any(|header| header.name.eq_ignore_ascii_case(name))
        {
            return Err(format!("header {name} is given twice"));
        }
        headers.push(HttpHeader {
            name: name.to_owned(),
            value: Secret::new(value),
        });
    }
    Ok(headers)
}

/// RFC 9110 `tchar`.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// The `postgres` exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresExporterConfig {
    pub connection: PostgresConnection,
    pub table: PostgresTable,
    pub auto_migrate: bool,
}

/// How to reach the database: a URL, or upstream's separate parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostgresConnection {
    /// `postgres://…` or `postgresql://…`. Its `sslmode` and `sslrootcert`
    /// query parameters are read by gpuid ([`split_postgres_url`]), because
    /// the client library knows neither `allow`, `verify-ca`, `verify-full`
    /// nor root certificates; `POSTGRES_SSLROOTCERT` given with a URL is
    /// appended to it as `sslrootcert`.
    Dsn(Secret),
    Params {
        host: String,
        port: u16,
        dbname: String,
        user: String,
        password: Secret,
        sslmode: SslMode,
        /// `POSTGRES_SSLROOTCERT`: PEM file of trusted CA certificates.
        sslrootcert: Option<String>,
    },
}

impl PostgresConnection {
    /// A libpq `key=value` string with every value quoted and escaped, so
    /// passwords with spaces or quotes work (upstream's did not).
    pub fn to_libpq_string(&self) -> Secret {
        match self {
            PostgresConnection::Dsn(dsn) => dsn.clone(),
            PostgresConnection::Params {
                host,
                port,
                dbname,
                user,
                password,
                sslmode,
                sslrootcert,
            } => {
                let port = port.to_string();
                let mut pairs = vec![
                    ("host", host.as_str()),
                    ("port", port.as_str()),
                    ("dbname", dbname.as_str()),
                    ("user", user.as_str()),
                    ("password", password.expose()),
                    ("sslmode", sslmode.as_str()),
                ];
                if let Some(root) = sslrootcert {
                    pairs.push(("sslrootcert", root.as_str()));
                }
                let pairs: Vec<String> = pairs
                    .into_iter()
                    .map(|(key, value)| format!("{key}={}", libpq_quote(value)))
                    .collect();
                Secret::new(pairs.join(" "))
            }
        }
    }
}

fn libpq_quote(value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
    format!("'{escaped}'")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    pub fn parse(raw: &str) -> Option<SslMode> {
        Some(match raw.trim() {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// A `postgres://` URL with the TLS parameters gpuid handles itself taken
/// out: what is left goes to the client library unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresUrlParts {
    /// The URL without `sslmode` and `sslrootcert`.
    pub url: Secret,
    /// `None` when the URL has no `sslmode` (libpq's default, `prefer`).
    pub sslmode: Option<SslMode>,
    /// Percent-decoded path of `sslrootcert`.
    pub sslrootcert: Option<String>,
}

/// Splits `sslmode` and `sslrootcert` out of a URL's query (libpq URL
/// rules: `&`-separated `key=value`, percent-encoded; the last repeated
/// key wins). Messages never quote the URL: it may hold a password.
pub fn split_postgres_url(url: &str) -> Result<PostgresUrlParts, String> {
    let url = url.trim();
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut sslmode = None;
    let mut sslrootcert = None;
    for pair in query.into_iter().flat_map(|query| query.split('&')) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => {
                let value = percent_decode(value)
                    .ok_or("sslmode in the URL is not valid percent-encoding")?;
                sslmode = Some(SslMode::parse(&value).ok_or_else(|| {
                    format!(
                        "sslmode={value:?} in the URL is not an sslmode (use disable, allow, prefer, require, verify-ca or verify-full)"
                    )
                })?);
            }
            "sslrootcert" => {
                let value = percent_decode(value)
                    .ok_or("sslrootcert in the URL is not valid percent-encoding")?;
                if value.trim().is_empty() {
                    return Err("sslrootcert in the URL is empty".to_owned());
                }
                sslrootcert = Some(value);
            }
            _ if pair.is_empty() => {}
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(PostgresUrlParts {
        url: Secret::new(url),
        sslmode,
        sslrootcert,
    })
}

fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Everything but RFC 3986 unreserved characters and `/`, so a file path
/// survives as one query value.
fn percent_encode(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A root-certificate file must be PEM (libpq's rule too); checked here so
/// a wrong path or a DER file fails at start, naming the knob.
fn check_root_cert(content: &str) -> Result<(), String> {
    if content.contains("-----BEGIN CERTIFICATE-----") {
        Ok(())
    } else {
        Err("no PEM certificate in the file (expected -----BEGIN CERTIFICATE-----)".to_owned())
    }
}

/// A table name, optionally qualified by a schema. Both parts are plain SQL
/// identifiers, so they can be interpolated into DDL safely (quoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresTable {
    pub schema: Option<String>,
    pub name: String,
}

impl PostgresTable {
    /// `"schema"."table"` or `"table"`.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.name),
            None => format!("\"{}\"", self.name),
        }
    }
}

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes.
const MAX_IDENTIFIER: usize = 63;

/// The longest name PostgreSQL derives from the table name; every derived
/// table and index name must fit [`MAX_IDENTIFIER`] (longer ones would be
/// silently truncated by the server and collide).
pub const LONGEST_DERIVED_SUFFIX: &str = "_inventory_last_seen_idx";

/// The longest `POSTGRES_TABLE` name part: 63 - 24 = 39 characters.
pub const MAX_POSTGRES_TABLE_NAME: usize = MAX_IDENTIFIER - LONGEST_DERIVED_SUFFIX.len();

/// The default table name (upstream's).
pub const DEFAULT_POSTGRES_TABLE: &str = "gpu";

fn is_sql_identifier(part: &str) -> bool {
    let mut bytes = part.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The one `POSTGRES_TABLE` rule: `[schema.]name`, both SQL identifiers
/// (`[A-Za-z_][A-Za-z0-9_]*`), the schema at most 63 characters and the
/// name at most [`MAX_POSTGRES_TABLE_NAME`], so that `<name>_inventory`,
/// `<name>_events` and their index names all fit.
pub fn parse_table(raw: &str) -> Result<PostgresTable, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(PostgresTable {
            schema: None,
            name: DEFAULT_POSTGRES_TABLE.to_owned(),
        });
    }
    let (schema, name) = match raw.split_once('.') {
        Some((schema, name)) => (Some(schema), name),
        None => (None, raw),
    };
    let valid = is_sql_identifier(name) && schema.is_none_or(is_sql_identifier);
    if !valid {
        return Err(format!(
            "postgres table name contains invalid characters: {raw} (use letters, digits and _, optionally schema.table)"
        ));
    }
    if name.len() > MAX_POSTGRES_TABLE_NAME {
        return Err(format!(
            "postgres table name {name:?} is {} characters long; at most {MAX_POSTGRES_TABLE_NAME} are allowed, because the derived names up to {name}{LONGEST_DERIVED_SUFFIX} must fit PostgreSQL's {MAX_IDENTIFIER}-character identifier limit",
            name.len()
        ));
    }
    if let Some(schema) = schema
        && schema.len() > MAX_IDENTIFIER
    {
        return Err(format!(
            "postgres schema name {schema:?} is {} characters long; PostgreSQL allows at most {MAX_IDENTIFIER}",
            schema.len()
        ));
    }
    Ok(PostgresTable {
        schema: schema.map(str::to_owned),
        name: name.to_owned(),
    })
}

pub(super) fn postgres(parser: &mut Parser<'_>, selected: bool) -> PostgresExporterConfig {
    let mut dsn = parser.secret(&knobs::POSTGRES_DSN, &knobs::POSTGRES_DSN_FILE);
    let dsn_knob = if parser.non_blank(&knobs::POSTGRES_DSN).is_some() {
        &knobs::POSTGRES_DSN
    } else {
        &knobs::POSTGRES_DSN_FILE
    };
    let mut dsn_rootcert = None;
    if let Some(dsn) = &dsn {
        let url = dsn.expose().trim();
        let valid = ["postgres://", "postgresql://"].iter().any(|scheme| {
            url.strip_prefix(scheme)
                .is_some_and(|rest| !rest.is_empty())
        });
        if !valid {
            parser.fail(
                dsn_knob,
                "not a PostgreSQL URL (use postgres://user:password@host:5432/db?sslmode=require)",
            );
        } else {
            match split_postgres_url(url) {
                Ok(parts) => dsn_rootcert = parts.sslrootcert,
                Err(problem) => parser.fail(dsn_knob, problem),
            }
        }
    }
    if let Some(path) = &dsn_rootcert {
        let problem = match parser.read_file(Path::new(path.trim())) {
            Ok(content) => check_root_cert(&content).err(),
            Err(error) => Some(format!("cannot read the file: {error}")),
        };
        if let Some(problem) = problem {
            parser.fail(dsn_knob, format!("sslrootcert {path:?}: {problem}"));
        }
    }
    let sslrootcert = parser
        .non_blank(&knobs::POSTGRES_SSLROOTCERT)
        .map(|setting| {
            let path = setting.value.trim().to_owned();
            let problem = match parser.read_file(Path::new(&path)) {
                Ok(content) => check_root_cert(&content).err(),
                Err(error) => Some(format!("cannot read the file: {error}")),
            };
            if let Some(problem) = problem {
                parser.reject(&knobs::POSTGRES_SSLROOTCERT, &setting, problem);
            }
            path
        });

    let port = parser.typed(
        &knobs::POSTGRES_PORT,
        "integer",
        "not an integer",
        parse_go_int,
        5432,
    );
    let port = match u16::try_from(port) {
        Ok(port) if port >= 1 => port,
        _ => {
            parser.violation(
                &knobs::POSTGRES_PORT,
                format!("postgres port must be between 1 and 65535, got {port}"),
            );
            5432
        }
    };
    let sslmode = match parser.non_blank(&knobs::POSTGRES_SSLMODE) {
        Some(setting) => SslMode::parse(&setting.value).unwrap_or_else(|| {
            parser.reject(
                &knobs::POSTGRES_SSLMODE,
                &setting,
                "not an sslmode (use disable, allow, prefer, require, verify-ca or verify-full)",
            );
            SslMode::Require
        }),
        None => SslMode::Require,
    };
    // Empty means the default, as upstream (its exporter knobs treat an
    // empty variable as unset).
    let table = match parser.non_blank(&knobs::POSTGRES_TABLE) {
        Some(setting) => parse_table(&setting.value).unwrap_or_else(|problem| {
            parser.reject(&knobs::POSTGRES_TABLE, &setting, problem);
            PostgresTable {
                schema: None,
                name: DEFAULT_POSTGRES_TABLE.to_owned(),
            }
        }),
        None => PostgresTable {
            schema: None,
            name: DEFAULT_POSTGRES_TABLE.to_owned(),
        },
    };
    let auto_migrate = parser.typed(
        &knobs::POSTGRES_AUTO_MIGRATE,
        "boolean",
        "not a boolean (use true or false)",
        parse_bool,
        // On by default so that an upstream deployment's environment, which
        // never names this knob, gets its tables created and exports.
        true,
    );
    let password = parser.secret(&knobs::POSTGRES_PASSWORD, &knobs::POSTGRES_PASSWORD_FILE);

    let connection = match dsn.take() {
        Some(mut dsn) => {
            // The URL carries host, port, database, user, password and
            // sslmode; accepting both forms would leave one silently ignored.
            for knob in [
                &knobs::POSTGRES_HOST,
                &knobs::POSTGRES_PORT,
                &knobs::POSTGRES_DB,
                &knobs::POSTGRES_USER,
                &knobs::POSTGRES_PASSWORD,
                &knobs::POSTGRES_PASSWORD_FILE,
                &knobs::POSTGRES_SSLMODE,
            ] {
                if parser.non_blank(knob).is_some() {
                    parser.fail(
                        knob,
                        "cannot be combined with POSTGRES_DSN; put it in the URL instead",
                    );
                }
            }
            match (&sslrootcert, &dsn_rootcert) {
                (Some(_), Some(_)) => parser.fail(
                    &knobs::POSTGRES_SSLROOTCERT,
                    "cannot be combined with sslrootcert in POSTGRES_DSN; set it in one place",
                ),
                // Carried in the URL so the connection has one description.
                (Some(path), None) => {
                    let url = dsn.expose().trim();
                    let separator = if url.contains('?') { '&' } else { '?' };
                    dsn = Secret::new(format!(
                        "{url}{separator}sslrootcert={}",
                        percent_encode(path)
                    ));
                }
                _ => {}
            }
            PostgresConnection::Dsn(dsn)
        }
        None => {
            let mut required = |knob: &Knob, message: &str| match parser.non_blank(knob) {
                Some(setting) => setting.value.trim().to_owned(),
                None => {
                    if selected {
                        parser.fail(knob, message);
                    }
                    String::new()
                }
            };
            let host = required(
                &knobs::POSTGRES_HOST,
                "postgres host is required (set POSTGRES_HOST or POSTGRES_DSN)",
            );
            let dbname = required(
                &knobs::POSTGRES_DB,
                "postgres database name is required (set POSTGRES_DB)",
            );
            let user = required(
                &knobs::POSTGRES_USER,
                "postgres user is required (set POSTGRES_USER)",
            );
            let password_reported = parser.errors.iter().any(|e| {
                e.env == knobs::POSTGRES_PASSWORD.env || e.env == knobs::POSTGRES_PASSWORD_FILE.env
            });
            if password.is_none() && selected && !password_reported {
                parser.fail(
                    &knobs::POSTGRES_PASSWORD,
                    "postgres password is required (set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE)",
                );
            }
            PostgresConnection::Params {
                host,
                port,
                dbname,
                user,
                password: password.unwrap_or_else(|| Secret::new("")),
                sslmode,
                sslrootcert,
            }
        }
    };
    PostgresExporterConfig {
        connection,
        table,
        auto_migrate,
    }
}

/// The `s3` exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3ExporterConfig {
    pub bucket: String,
    /// Leading key segment without surrounding slashes; empty for none.
    pub prefix: String,
    pub region: String,
    pub partition_pattern: String,
    pub endpoint: Option<String>,
    pub force_path_style: bool,
    /// `S3_FORMAT`: body format of the objects.
    pub format: S3Format,
}

/// Body format of S3 objects (`S3_FORMAT`). How bodies are written is in
/// `export::s3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum S3Format {
    /// CSV with a header row; upstream wrote CSV without one.
    #[default]
    Csv,
    /// One JSON object per line, every field.
    Ndjson,
}

impl S3Format {
    /// `csv` or `ndjson` (also `jsonl`), any case.
    pub fn parse(raw: &str) -> Option<S3Format> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "csv" => Some(S3Format::Csv),
            "ndjson" | "jsonl" => Some(S3Format::Ndjson),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            S3Format::Csv => "csv",
            S3Format::Ndjson => "ndjson",
        }
    }
}

pub(super) fn s3(parser: &mut Parser<'_>, selected: bool) -> S3ExporterConfig {
    const WRAP: &str = "S3 configuration validation failed";
    let bucket = match parser.non_blank(&knobs::S3_BUCKET) {
        Some(setting) => setting.value.trim().to_owned(),
        None => {
            if selected {
                parser.fail(
                    &knobs::S3_BUCKET,
                    format!("{WRAP}: S3 bucket name is required"),
                );
            }
            String::new()
        }
    };
    let prefix = parser
        .setting(&knobs::S3_PREFIX)
        .map(|setting| setting.value.trim().trim_matches('/').to_owned())
        .unwrap_or_default();
    // Upstream reports a region of only blanks; an empty one means default.
    let region = match parser.setting(&knobs::S3_REGION) {
        Some(setting) if setting.value.is_empty() => "us-east-1".to_owned(),
        Some(setting) if setting.is_blank() => {
            parser.reject(
                &knobs::S3_REGION,
                &setting,
                format!("{WRAP}: AWS region is required"),
            );
            String::new()
        }
        Some(setting) => setting.value.trim().to_owned(),
        None => "us-east-1".to_owned(),
    };
    let partition_pattern = match parser.non_blank(&knobs::S3_PARTITION_PATTERN) {
        Some(setting) => {
            if let Err(problem) = check_partition_pattern(&setting.value) {
                parser.reject(&knobs::S3_PARTITION_PATTERN, &setting, problem);
            }
            setting.value.trim().to_owned()
        }
        None => knobs::S3_PARTITION_PATTERN
            .default
            .unwrap_or_default()
            .to_owned(),
    };
    let endpoint = parser.non_blank(&knobs::S3_ENDPOINT).map(|setting| {
        if !is_http_url(setting.value.trim()) {
            parser.reject(
                &knobs::S3_ENDPOINT,
                &setting,
                "not an http:// or https:// URL",
            );
        }
        setting.value.trim().to_owned()
    });
    let force_path_style = parser.typed(
        &knobs::S3_FORCE_PATH_STYLE,
        "boolean",
        "not a boolean (use true or false)",
        parse_bool,
        false,
    );
    let format = parser.typed(
        &knobs::S3_FORMAT,
        "S3 format",
        "not an S3 format (use csv or ndjson)",
        S3Format::parse,
        S3Format::Csv,
    );
    S3ExporterConfig {
        bucket,
        prefix,
        region,
        partition_pattern,
        endpoint,
        force_path_style,
        format,
    }
}

/// Upstream substitutes only `%Y %m %d %H`; any other `%` sequence would
/// reach the key literally, which is never what the user meant.
fn check_partition_pattern(pattern: &str) -> Result<(), String> {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('Y' | 'm' | 'd' | 'H') => {}
                Some(other) => {
                    return Err(format!(
                        "unsupported placeholder %{other} (use %Y, %m, %d and %H)"
                    ));
                }
                None => return Err("ends with a lone % (use %Y, %m, %d and %H)".to_owned()),
            }
        }
    }
    Ok(())
}

pub(super) fn to_duration(nanos: i128) -> Duration {
    let nanos = u64::try_from(nanos.max(0)).unwrap_or(u64::MAX);
    Duration::from_nanos(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_in_order_with_values_kept_secret() {
        let headers = parse_headers("X-Tenant=blue, X-Api-Key=abc=def").unwrap();
        assert_eq!(headers.len(), 2);
        assert_eq!(headers[0].name, "X-Tenant");
        assert_eq!(headers[0].value.expose(), "blue");
        assert_eq!(
            headers[1].value.expose(),
            "abc=def",
            "only the first = splits"
        );
        assert!(!format!("{headers:?}").contains("abc"));
    }

    #[test]
    fn header_lists_with_bad_entries_are_rejected_without_echoing_values() {
        let error = parse_headers("X-A=1,secretvalue").unwrap_err();
        assert!(error.contains("entry 2"), "{error}");
        assert!(!error.contains("secretvalue"));
        assert!(parse_headers("Bad Name=1").is_err());
        assert!(parse_headers("X-A=1,x-a=2").unwrap_err().contains("twice"));
        assert!(
            parse_headers("Authorization=Bearer x")
                .unwrap_err()
                .contains("HTTP_AUTH_TOKEN")
        );
        assert!(parse_headers("X-A=a\nb").is_err());
    }

    #[test]
    fn table_names_may_be_schema_qualified() {
        assert_eq!(
            parse_table("gpu").unwrap(),
            PostgresTable {
                schema: None,
                name: "gpu".into()
            }
        );
        let qualified = parse_table("inventory.gpu_serials").unwrap();
        assert_eq!(qualified.quoted(), "\"inventory\".\"gpu_serials\"");
        assert_eq!(parse_table(" ").unwrap().name, DEFAULT_POSTGRES_TABLE);
        for bad in ["1gpu", "gpu;drop", "a.b.c", ".gpu", "gpu.", "gpu table"] {
            let error = parse_table(bad).unwrap_err();
            assert!(
                error.starts_with("postgres table name contains invalid characters"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn libpq_strings_quote_and_escape_every_value() {
        let connection = PostgresConnection::Params {
            host: "db.local".into(),
            port: 5432,
            dbname: "inv".into(),
            user: "gpuid".into(),
            password: Secret::new("p a'ss\\"),
            sslmode: SslMode::VerifyFull,
            sslrootcert: None,
        };
        assert_eq!(
            connection.to_libpq_string().expose(),
            r"host='db.local' port='5432' dbname='inv' user='gpuid' password='p a\'ss\\' sslmode='verify-full'"
        );
    }

    #[test]
    fn partition_patterns_only_accept_the_four_upstream_placeholders() {
        assert!(check_partition_pattern("year=%Y/month=%m/day=%d/hour=%H").is_ok());
        assert!(check_partition_pattern("static/path").is_ok());
        assert!(check_partition_pattern("%M").unwrap_err().contains("%M"));
        assert!(check_partition_pattern("x%").is_err());
    }
}
