//! The parts of the Kubernetes CEL libraries that CRD rules use most and
//! that cel-rust lacks: the list library (`isSorted`, `sum`, `min`, `max`,
//! `indexOf`, `lastIndexOf`), the regex library (`find`, `findAll`) and the
//! sets extension (`sets.contains`, `sets.intersects`, `sets.equivalent`).

use std::cmp::Ordering;
use std::sync::Arc;

use ::cel::common::types::{DYN_TYPE, INT_TYPE, LIST_TYPE, STRING_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError, Value};
use regex::Regex;

/// Registers the functions on `env`.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "isSorted",
        "k8s_list_is_sorted",
        LIST_TYPE,
        vec![],
        is_sorted,
    )?;
    env.add_member_overload("sum", "k8s_list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "k8s_list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "k8s_list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "k8s_list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "k8s_list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    env.add_member_overload(
        "find",
        "k8s_string_find",
        STRING_TYPE,
        vec![STRING_TYPE],
        find,
    )?;
    env.add_member_overload(
        "findAll",
        "k8s_string_find_all",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all,
    )?;
    env.add_member_overload(
        "findAll",
        "k8s_string_find_all_n",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all_n,
    )?;
    env.add_overload(
        "sets.contains",
        "k8s_sets_contains",
        vec![LIST_TYPE, LIST_TYPE],
        sets_contains,
    )?;
    env.add_overload(
        "sets.intersects",
        "k8s_sets_intersects",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    env.add_overload(
        "sets.equivalent",
        "k8s_sets_equivalent",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    Ok(())
}

/// A CEL list's elements, shared with the value they came from.
type CelList = Arc<Vec<Value>>;

/// The arguments as plain values.
fn values(args: &[CowVal<'_, '_>]) -> Result<Vec<Value>, ExecutionError> {
    args.iter().map(|a| Value::try_from(a.as_ref())).collect()
}

fn owned<'b, 'v>(value: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn Val> = value.try_into()?;
    Ok(CowVal::Owned(boxed))
}

fn list_arg(value: &Value, function: &str) -> Result<CelList, ExecutionError> {
    match value {
        Value::List(items) => Ok(Arc::clone(items)),
        _ => Err(ExecutionError::function_error(function, "expects a list")),
    }
}

fn string_arg(value: &Value, function: &str) -> Result<Arc<String>, ExecutionError> {
    match value {
        Value::String(s) => Ok(Arc::clone(s)),
        _ => Err(ExecutionError::function_error(function, "expects a string")),
    }
}

fn compare(a: &Value, b: &Value, function: &str) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b)
        .ok_or_else(|| ExecutionError::function_error(function, "list elements must be comparable"))
}

fn args_n<const N: usize>(args: Vec<CowVal<'_, '_>>) -> Result<[Value; N], ExecutionError> {
    let vals = values(&args)?;
    let len = vals.len();
    vals.try_into()
        .map_err(|_| ExecutionError::invalid_argument_count(N, len))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = args_n::<1>(args)?;
    let items = list_arg(&list, "isSorted")?;
    for pair in items.windows(2) {
        if compare(&pair[0], &pair[1], "isSorted")? == Ordering::Greater {
            return owned(Value::Bool(false));
        }
    }
    owned(Value::Bool(true))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = args_n::<1>(args)?;
    let items = list_arg(&list, "sum")?;
    let overflow = || ExecutionError::function_error("sum", "integer overflow");
    let total = match items.first() {
        None | Some(Value::Int(_)) => {
            let mut total: i64 = 0;
            for item in items.iter() {
                let Value::Int(i) = item else {
                    return Err(ExecutionError::function_error("sum", "mixed element types"));
                };
                total = total.checked_add(*i).ok_or_else(overflow)?;
            }
            Value::Int(total)
        }
        Some(Value::UInt(_)) => {
            let mut total: u64 = 0;
            for item in items.iter() {
                let Value::UInt(u) = item else {
                    return Err(ExecutionError::function_error("sum", "mixed element types"));
                };
                total = total.checked_add(*u).ok_or_else(overflow)?;
            }
            Value::UInt(total)
        }
        Some(Value::Float(_)) => {
            let mut total = 0.0;
            for item in items.iter() {
                let Value::Float(f) = item else {
                    return Err(ExecutionError::function_error("sum", "mixed element types"));
                };
                total += f;
            }
            Value::Float(total)
        }
        Some(_) => {
            return Err(ExecutionError::function_error(
                "sum",
                "elements must be numbers",
            ));
        }
    };
    owned(total)
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    keep: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = args_n::<1>(args)?;
    let items = list_arg(&list, function)?;
    let mut best = items.first().cloned().ok_or_else(|| {
        ExecutionError::function_error(
            function,
            format!("{function}(list) argument must not be empty"),
        )
    })?;
    for item in items.iter().skip(1) {
        if compare(item, &best, function)? == keep {
            best = item.clone();
        }
    }
    owned(best)
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, needle] = args_n::<2>(args)?;
    let items = list_arg(&list, "indexOf")?;
    let found = items.iter().position(|v| *v == needle);
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, needle] = args_n::<2>(args)?;
    let items = list_arg(&list, "lastIndexOf")?;
    let found = items.iter().rposition(|v| *v == needle);
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn regex_arg(pattern: &Value, function: &str) -> Result<Regex, ExecutionError> {
    let pattern = string_arg(pattern, function)?;
    Regex::new(&pattern).map_err(|e| ExecutionError::function_error(function, e))
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [target, pattern] = args_n::<2>(args)?;
    let text = string_arg(&target, "find")?;
    let re = regex_arg(&pattern, "find")?;
    let found = re
        .find(&text)
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    owned(Value::String(Arc::new(found)))
}

fn find_all_limited<'b, 'v>(
    target: &Value,
    pattern: &Value,
    limit: Option<usize>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let text = string_arg(target, "findAll")?;
    let re = regex_arg(pattern, "findAll")?;
    let matches = re
        .find_iter(&text)
        .take(limit.unwrap_or(usize::MAX))
        .map(|m| Value::String(Arc::new(m.as_str().to_string())))
        .collect();
    owned(Value::List(Arc::new(matches)))
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [target, pattern] = args_n::<2>(args)?;
    find_all_limited(&target, &pattern, None)
}

fn find_all_n<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [target, pattern, n] = args_n::<3>(args)?;
    // A negative limit means all matches, as in cel-go.
    let limit = match n {
        Value::Int(n) if n >= 0 => Some(n as usize),
        Value::Int(_) => None,
        _ => {
            return Err(ExecutionError::function_error(
                "findAll",
                "expects an int limit",
            ));
        }
    };
    find_all_limited(&target, &pattern, limit)
}

fn two_lists(
    args: Vec<CowVal<'_, '_>>,
    function: &str,
) -> Result<(CelList, CelList), ExecutionError> {
    let [a, b] = args_n::<2>(args)?;
    Ok((list_arg(&a, function)?, list_arg(&b, function)?))
}

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(args, "sets.contains")?;
    owned(Value::Bool(b.iter().all(|x| a.contains(x))))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(args, "sets.intersects")?;
    owned(Value::Bool(b.iter().any(|x| a.contains(x))))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(args, "sets.equivalent")?;
    owned(Value::Bool(
        b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::cel::Context;

    fn eval(expr: &str) -> Result<Value, ExecutionError> {
        let mut env = Env::stdlib();
        env.add_extension(::cel::extensions::strings).unwrap();
        env.add_extension(extension).unwrap();
        let env = Arc::new(env);
        let program = env.compile(expr).unwrap();
        program.execute(&Context::with_env(env))
    }

    #[test]
    fn list_library_orders_sums_and_searches() {
        assert_eq!(eval("[1, 2, 2, 5].isSorted()"), Ok(Value::Bool(true)));
        assert_eq!(eval("['b', 'a'].isSorted()"), Ok(Value::Bool(false)));
        assert_eq!(eval("[1, 2, 3].sum()"), Ok(Value::Int(6)));
        assert_eq!(eval("[].sum()"), Ok(Value::Int(0)));
        assert_eq!(eval("[1.5, 2.5].sum()"), Ok(Value::Float(4.0)));
        assert_eq!(eval("[3, 1, 2].min()"), Ok(Value::Int(1)));
        assert_eq!(eval("[3, 1, 2].max()"), Ok(Value::Int(3)));
        assert_eq!(eval("['a', 'b', 'a'].indexOf('a')"), Ok(Value::Int(0)));
        assert_eq!(eval("['a', 'b', 'a'].lastIndexOf('a')"), Ok(Value::Int(2)));
        assert_eq!(eval("[1].indexOf(9)"), Ok(Value::Int(-1)));
        assert!(eval("[].min()").is_err());
    }

    #[test]
    fn string_index_of_still_works_beside_the_list_overload() {
        assert_eq!(eval("'hello'.indexOf('l')"), Ok(Value::Int(2)));
    }

    #[test]
    fn regex_library_finds_matches() {
        assert_eq!(
            eval("'abc 123 def 456'.find('[0-9]+')"),
            Ok(Value::from("123"))
        );
        assert_eq!(eval("'abc'.find('[0-9]+')"), Ok(Value::from("")));
        assert_eq!(eval("size('a1b2c3'.findAll('[0-9]'))"), Ok(Value::Int(3)));
        assert_eq!(
            eval("'a1b2c3'.findAll('[0-9]', 2)"),
            Ok(Value::from(vec!["1", "2"]))
        );
    }

    #[test]
    fn sets_extension_compares_lists_as_sets() {
        assert_eq!(
            eval("sets.contains([1, 2, 3], [3, 1])"),
            Ok(Value::Bool(true))
        );
        assert_eq!(eval("sets.contains([1], [2])"), Ok(Value::Bool(false)));
        assert_eq!(
            eval("sets.intersects([1, 2], [2, 9])"),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            eval("sets.equivalent([1, 2, 2], [2, 1])"),
            Ok(Value::Bool(true))
        );
        assert_eq!(eval("sets.equivalent([1], [1, 3])"), Ok(Value::Bool(false)));
    }
}
