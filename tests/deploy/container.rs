//! deploy/container/Containerfile and the build context's .dockerignore.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::tools;
use super::{read, root};

const CONTAINERFILE: &str = "deploy/container/Containerfile";
/// The build command of both layers; the layer-1 replay below stops before it.
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
    assert!(
        ins.iter().filter(|l| l.starts_with("FROM ")).count() >= 2,
        "multi-stage"
    );
    assert!(
        ins.iter()
            .any(|l| l.starts_with("USER ") && !l.contains("root"))
    );
    assert!(!file.contains(":latest"), "pinned bases");
}

/// DEPLOY-9: the build stage copies only manifests (and what build.rs reads) before building the
/// dependencies, then the sources; the dependency layer's stand-ins cover every target the
/// manifests declare, which this checks by replaying that layer's COPYs and its commands up to
/// the build, then looking for each target's source file.
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
        assert!(!srcs.contains(&"."), "layer 1 copies single paths");
        for src in srcs {
            let to = if dest.ends_with('/') {
                ctx.path()
                    .join(dest)
                    .join(Path::new(src).file_name().unwrap())
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
    let out = Command::new("sh")
        .args([
            "-ec",
            until_build.trim_end().trim_end_matches("&&"),
            "layer1",
        ])
        .current_dir(ctx.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "layer 1 of {CONTAINERFILE} fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every target of the real workspace that exists without a file to discover it needs its
    // stand-in. (Cargo leaves a target whose file is missing out of the stand-in tree's metadata,
    // so the real tree's metadata is the list.)
    let mut targets = 0;
    for (name, src) in workspace_targets(&root()) {
        assert!(
            ctx.path().join(&src).exists(),
            "{CONTAINERFILE}: layer 1 has no stand-in for target {name} ({})",
            src.display()
        );
        targets += 1;
    }
    assert!(targets >= 4, "{targets} targets");
    assert!(!workspace_targets(ctx.path()).is_empty());
    // What the build scripts read outside their crate (`"../proto"`, `"../third_party/..."`)
    // must be in the layer too, or its dependency build fails.
    for crate_dir in [".", "registries"] {
        let script = read(&root().join(crate_dir).join("build.rs"));
        for path in script.split('"').filter(|s| s.starts_with("../")) {
            let needed = Path::new(crate_dir).join(path);
            assert!(
                ctx.path().join(&needed).exists(),
                "{CONTAINERFILE}: layer 1 lacks {} (read by {crate_dir}/build.rs)",
                needed.display()
            );
        }
    }
}

/// (name, source path relative to the workspace root) of the targets of the workspace's packages
/// that cargo does not discover from files (tests/*.rs, src/bin/*.rs...): libraries, build
/// scripts, `src/main.rs`, and the ones named in a `[[bin]]`, `[[bench]]`, `[[example]]` or
/// `[[test]]` table of a manifest.
fn workspace_targets(dir: &Path) -> Vec<(String, PathBuf)> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--locked",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ws = PathBuf::from(meta["workspace_root"].as_str().unwrap());
    let mut targets = Vec::new();
    for package in meta["packages"].as_array().unwrap() {
        let declared =
            declared_targets(&read(Path::new(package["manifest_path"].as_str().unwrap())));
        for target in package["targets"].as_array().unwrap() {
            let name = target["name"].as_str().unwrap();
            let src = PathBuf::from(target["src_path"].as_str().unwrap());
            let kinds = target["kind"].to_string();
            let needed = kinds.contains("lib")
                || kinds.contains("custom-build")
                || src.ends_with("src/main.rs")
                || declared.iter().any(|d| d == name);
            if needed {
                let rel = src.strip_prefix(&ws).unwrap_or(&src).to_path_buf();
                targets.push((name.to_string(), rel));
            }
        }
    }
    targets
}

/// The `name`s of a manifest's `[[bin]]`, `[[bench]]`, `[[example]]` and `[[test]]` tables.
fn declared_targets(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_target_table = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_target_table = ["[[bin]]", "[[bench]]", "[[example]]", "[[test]]"].contains(&line);
        } else if in_target_table
            && let Some(v) = line.strip_prefix("name").map(str::trim_start)
            && let Some(v) = v.strip_prefix('=')
        {
            names.push(v.trim().trim_matches('"').to_string());
        }
    }
    names
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
    for must in [
        "target/",
        "**/target/",
        ".git/",
        "fuzz/artifacts/",
        "fuzz/corpus/",
    ] {
        assert!(patterns.contains(&must), ".dockerignore lacks {must}");
    }
    assert!(
        !patterns.iter().any(|p| p.starts_with('!')),
        "no re-includes"
    );
}
