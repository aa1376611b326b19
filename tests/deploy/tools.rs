//! The external checkers the deploy tests run, as scripts/deploy/install-tools.sh installs them:
//! Helm (helm-sdkpy through scripts/deploy/helm_render.py), kubernetes-validate and hadolint in one
//! virtualenv, and systemd-analyze from the machine.
//!
//! A tool that is missing fails the test with what to run, unless the installer wrote it to
//! `skipped.txt` because it cannot install it on this machine (then the check is skipped, saying
//! why).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::root;

/// The tools' directory when `TRIBUTARY_DEPLOY_TOOLS` is not set (install-tools.sh's default).
const DEFAULT_TOOLS_DIR: &str = ".cache/tributary/deploy-tools";
/// Where the installer names the tools it could not install, one `name: reason` a line.
const SKIPPED_FILE: &str = "skipped.txt";

fn tools_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TRIBUTARY_DEPLOY_TOOLS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").expect("HOME or TRIBUTARY_DEPLOY_TOOLS is set");
    Path::new(&home).join(DEFAULT_TOOLS_DIR)
}

/// `Some(path)` of a tool, `None` (after saying why) when the installer could not install it
/// here; panics when it is simply missing.
fn find(name: &str, path: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = path.filter(|p| p.exists()) {
        return Some(p);
    }
    let dir = tools_dir();
    let skipped = std::fs::read_to_string(dir.join(SKIPPED_FILE)).unwrap_or_default();
    if let Some(reason) = skipped
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
    {
        eprintln!("SKIPPED: the {name} checks: {}", reason.trim());
        return None;
    }
    panic!(
        "{name} is not installed (looked in {}): run scripts/deploy/install-tools.sh, or \
         scripts/test.sh which runs it",
        dir.display()
    );
}

fn venv_bin(name: &str) -> PathBuf {
    tools_dir().join("venv/bin").join(name)
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// What a tool printed and whether it succeeded.
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

fn run(cmd: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    Run {
        ok: status.success(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Helm, through helm-sdkpy.
pub struct Helm(PathBuf);

impl Helm {
    pub fn find() -> Option<Self> {
        let python = find("helm", Some(venv_bin("python")))?;
        let has_sdk = Command::new(&python)
            .args(["-c", "import helm_sdkpy"])
            .status()
            .is_ok_and(|s| s.success());
        if !has_sdk {
            find("helm", None)?;
        }
        Some(Self(python))
    }

    fn script(&self) -> Command {
        let mut c = Command::new(&self.0);
        c.arg(root().join("scripts/deploy/helm_render.py"));
        c
    }

    /// `helm template tributary deploy/helm/tributary -n tributary-system`, with values given as
    /// JSON objects merged over values.yaml (`--set-json`).
    pub fn template(&self, values: &[&str]) -> Run {
        let mut c = self.script();
        c.args(["template", "deploy/helm/tributary"]);
        c.args(["--release", "tributary", "--namespace", "tributary-system"]);
        for v in values {
            c.args(["--set-json", v]);
        }
        run(&mut c)
    }

    /// `helm lint deploy/helm/tributary`.
    pub fn lint(&self) -> Run {
        run(self.script().args(["lint", "deploy/helm/tributary"]))
    }
}

/// `kubernetes-validate --strict` over files.
pub fn kubernetes_validate(files: &[PathBuf]) -> Option<Run> {
    let bin = find("kubernetes-validate", Some(venv_bin("kubernetes-validate")))?;
    Some(run(Command::new(bin).arg("--strict").args(files)))
}

/// `hadolint` over one Containerfile.
pub fn hadolint(file: &Path) -> Option<Run> {
    let bin = find("hadolint", Some(venv_bin("hadolint")))?;
    Some(run(Command::new(bin).arg(file)))
}

/// `systemd-analyze ARGS...`.
pub fn systemd_analyze(args: &[&std::ffi::OsStr]) -> Option<Run> {
    let bin = find("systemd-analyze", on_path("systemd-analyze"))?;
    Some(run(Command::new(bin).args(args)))
}
