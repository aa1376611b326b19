//! deploy/container/Containerfile and the build context's .dockerignore.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::tools;
use super::{read, root};

const CONTAINERFILE: &str = "deploy/container/Containerfile";
/// What every build runs in the dependency layer; the check below swaps it for `cargo metadata`.
const DEPENDENCY_BUILD: &str = "cargo build --release --locked --bin tributary";

/// The Containerfile's instructions, continuation lines joined, comments dropped.
fn instructions(file: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in file.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => current += head,
            None => {
                current += t;
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

#[test]
fn containerfile_passes_hadolint() {
    // DEPLOY-8
    let Some(run) = tools::hadolint(Path::new(CONTAINERFILE)) else {
        return;
    };
    assert!(run.ok, "hadolint:\n{}{}", run.stdout, run.stderr);
    assert!(run.stdout.trim().is_empty(), "findings:\n{}", run.stdout);
}

#[test]
fn image_is_multi_stage_non_root_and_pinned() {
    let file = read(&root().join(CONTAINERFILE));
    let ins = instructions(&file);
    assert!(ins.iter().filter(|l| l.starts_with("FROM ")).count() >= 2, "multi-stage");
    assert!(ins.iter().any(|l| l.starts_with("USER ") && !l.contains("root")));
    assert!(!file.contains(":latest"), "pinned bases");
}

/// DEPLOY-9: the build stage copies only manifests (and what build.rs reads) before building the
/// dependencies, then the sources; the dependency layer's stand-ins cover every target the
/// manifests declare, which this checks by running that layer's commands with `cargo metadata`
/// in place of the build and looking for each target's source file.
#[test]
fn dependencies_build_in_their_own_layer() {
    let file = read(&root().join(CONTAINERFILE));
    let ins = instructions(&file);
    let build_stage: Vec<&String> = ins
        .iter()
        .skip_while(|l| !l.starts_with("FROM "))
        .skip(1)
        .take_while(|l| !l.starts_with("FROM "))
        .collect();
    let copy_all = build_stage
        .iter()
        .position(|l| *l == "COPY . .")
        .expect("the sources come in with COPY . .");
    let layer1 = &build_stage[..copy_all];
    let run = layer1
        .iter()
        .find(|l| l.starts_with("RUN "))
        .expect("a RUN before COPY . .");
    assert!(run.contains(DEPENDENCY_BUILD), "{run}");
    assert!(
        build_stage[copy_all + 1..]
            .iter()
            .any(|l| l.starts_with("RUN ") && l.contains(DEPENDENCY_BUILD)),
        "the sources are built after COPY . ."
    );

    // Replay layer 1 in a scratch directory.
    let ctx = tempfile::tempdir().unwrap();
    for copy in layer1.iter().filter_map(|l| l.strip_prefix("COPY ")) {
        let words: Vec<&str> = copy.split_whitespace().collect();
        let (dest, srcs) = words.split_last().unwrap();
        assert!(!srcs.iter().any(|s| *s == "."), "layer 1 copies single paths");
        for src in srcs {
            let to = if dest.ends_with('/') {
                ctx.path().join(dest).join(Path::new(src).file_name().unwrap())
            } else {
                ctx.path().join(dest)
            };
            copy_tree(&root().join(src), &to);
        }
    }
    let until_build = run
        .strip_prefix("RUN ")
        .unwrap()
        .split(DEPENDENCY_BUILD)
        .next()
        .unwrap();
    let script = format!(
        "{until_build} cargo metadata --locked --offline --format-version 1 --no-deps > metadata.json"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cargo_dir = Path::new(&cargo).parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(cargo_dir).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let out = Command::new("sh")
        .args(["-ec", &script])
        .current_dir(ctx.path())
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "layer 1 of {CONTAINERFILE} fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_str(&read(&ctx.path().join("metadata.json"))).unwrap();
    let mut targets = 0;
    for package in meta["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            let src = PathBuf::from(target["src_path"].as_str().unwrap());
            assert!(
                src.exists(),
                "{CONTAINERFILE}: layer 1 has no stand-in for {} ({})",
                target["name"],
                src.display()
            );
            targets += 1;
        }
    }
    assert!(targets >= 4, "{targets} targets");
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

#[test]
fn build_context_leaves_out_outputs_vcs_and_fuzz_artifacts() {
    // DEPLOY-9
    let ignore = read(&root().join(".dockerignore"));
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for must in ["target/", "**/target/", ".git/", "fuzz/artifacts/", "fuzz/corpus/"] {
        assert!(patterns.contains(&must), ".dockerignore lacks {must}");
    }
    assert!(
        !patterns.iter().any(|p| p.starts_with('!')),
        "no re-includes"
    );
}
