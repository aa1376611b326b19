//! A renderer for the subset of Helm's template language that `deploy/helm/tributary` uses, so the
//! chart can be rendered and checked without the `helm` binary (not installable from the package
//! registries this project reaches).
//!
//! Supported: `{{ .Values.a.b }}`, `{{ .Release.Name }}`, `{{ .Release.Namespace }}`,
//! `{{ .Chart.AppVersion }}`, the pipes `| quote` and `| nindent N`, `toYaml EXPR`, `if EXPR` /
//! `end`, and `{{-` / `-}}` whitespace trimming. Anything else panics, so a template that strays
//! from the subset fails the test instead of rendering wrongly.

#![allow(dead_code)]

use serde_yaml::Value;

/// What a template sees.
pub struct Context<'a> {
    pub values: &'a Value,
    pub release: &'a str,
    pub namespace: &'a str,
    pub app_version: &'a str,
}

enum Token<'t> {
    Text(&'t str),
    Action(&'t str),
}

fn tokenize(tpl: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut rest = tpl;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let end = start + rest[start..].find("}}").expect("unclosed {{");
        let mut text = &rest[..start];
        if trim_next {
            text = text.trim_start();
        }
        let mut inner = &rest[start + 2..end];
        if let Some(i) = inner.strip_prefix('-') {
            text = text.trim_end();
            inner = i;
        }
        trim_next = false;
        if let Some(i) = inner.strip_suffix('-') {
            trim_next = true;
            inner = i;
        }
        out.push(Token::Text(text));
        out.push(Token::Action(inner.trim()));
        rest = &rest[end + 2..];
    }
    out.push(Token::Text(if trim_next {
        rest.trim_start()
    } else {
        rest
    }));
    out
}

impl Context<'_> {
    fn lookup(&self, expr: &str) -> Value {
        match expr {
            ".Release.Name" => Value::from(self.release),
            ".Release.Namespace" => Value::from(self.namespace),
            ".Chart.AppVersion" => Value::from(self.app_version),
            _ => {
                let path = expr
                    .strip_prefix(".Values.")
                    .unwrap_or_else(|| panic!("unsupported expression {expr:?}"));
                let mut v = self.values;
                for key in path.split('.') {
                    v = v
                        .get(key)
                        .unwrap_or_else(|| panic!("values have no {expr}"));
                }
                v.clone()
            }
        }
    }

    fn eval(&self, action: &str) -> String {
        let mut parts = action.split('|').map(str::trim);
        let head = parts.next().expect("an expression");
        let mut s = match head.strip_prefix("toYaml ") {
            Some(expr) => {
                let v = self.lookup(expr.trim());
                serde_yaml::to_string(&v)
                    .expect("values serialize")
                    .trim_end()
                    .to_string()
            }
            None => scalar(&self.lookup(head)),
        };
        for pipe in parts {
            if pipe == "quote" {
                s = format!("{s:?}");
            } else if let Some(n) = pipe.strip_prefix("nindent ") {
                let n: usize = n.trim().parse().expect("nindent N");
                let pad = " ".repeat(n);
                s = s.lines().map(|l| format!("\n{pad}{l}")).collect();
            } else {
                panic!("unsupported pipe {pipe:?}");
            }
        }
        s
    }

    /// Renders one template.
    pub fn render(&self, tpl: &str) -> String {
        let mut out = String::new();
        // Whether each enclosing `if` holds.
        let mut conds: Vec<bool> = Vec::new();
        for token in tokenize(tpl) {
            let active = conds.iter().all(|c| *c);
            match token {
                Token::Text(t) if active => out.push_str(t),
                Token::Text(_) => {}
                Token::Action(a) if a.starts_with("if ") => {
                    conds.push(truthy(&self.lookup(a[3..].trim())));
                }
                Token::Action("end") => {
                    conds.pop().expect("end without if");
                }
                Token::Action(a) if active => out.push_str(&self.eval(a)),
                Token::Action(_) => {}
            }
        }
        assert!(conds.is_empty(), "if without end");
        out
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("not a scalar (use toYaml): {other:?}"),
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Sequence(s) => !s.is_empty(),
        Value::Mapping(m) => !m.is_empty(),
        Value::Number(_) | Value::Tagged(_) => true,
    }
}
