//! The Python package (`python/`, docs/python.md), from `cargo test`: a
//! virtual environment under `target/` (made once, kept), maturin and
//! pytest (and pandas and Polars for the DataFrame tests) installed with
//! pip, the package built into it with `maturin develop`, and
//! `python/tests` run with pytest against this build's binary.
//!
//! Without `python3` (or its `venv` module, Debian's `python3-venv`), or
//! when pip cannot install the tools, the test prints `SKIPPED` and
//! passes, unless `DEDUP_REQUIRE_PYTHON=1` (which CI sets): then it fails.
//! The Redis tests among them follow `DEDUP_REQUIRE_REDIS` likewise.
//!
//! The extension builds in its own target directory (`target/python`),
//! with the `pyext` profile of `python/Cargo.toml`: optimised, without the
//! release profile's fat LTO.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What pip installs into the environment; a change reinstalls.
const TOOLS: &[&str] = &["maturin>=1.5,<2", "pytest>=7", "pandas", "polars"];

fn required() -> bool {
    std::env::var("DEDUP_REQUIRE_PYTHON").is_ok_and(|v| v == "1")
}

/// Skips (or, when Python is required, fails) with a reason.
fn skip(reason: &str) {
    assert!(
        !required(),
        "the Python tests are required (DEDUP_REQUIRE_PYTHON=1): {reason}"
    );
    // Past the test harness's capture, so that a skip shows in the run.
    let _ = writeln!(std::io::stderr(), "SKIPPED python: {reason}");
}

/// `command` with the variables cargo sets for this test removed (they
/// describe this crate, not the package the child builds).
fn clean(mut command: Command) -> Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
            || key == "CARGO_TARGET_TMPDIR"
        {
            command.env_remove(key.as_ref());
        }
    }
    command
}

/// Runs `command`, showing its output; whether it succeeded.
fn run(what: &str, command: &mut Command) -> bool {
    eprintln!("python: {what}: {command:?}");
    match command.status() {
        Ok(status) if status.success() => true,
        Ok(status) => {
            eprintln!("python: {what} failed: {status}");
            false
        }
        Err(e) => {
            eprintln!("python: {what} could not start: {e}");
            false
        }
    }
}

/// The virtual environment, made (and its tools installed) if need be.
fn venv(dir: &Path) -> Result<PathBuf, String> {
    let python = dir.join("bin/python");
    let marker = dir.join("tools.txt");
    let wanted = TOOLS.join("\n");
    if python.exists() && std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(dir);
    let made = run(
        "venv",
        Command::new("python3").args(["-m", "venv"]).arg(dir),
    );
    if !made || !python.exists() {
        let _ = std::fs::remove_dir_all(dir);
        return Err("python3 -m venv failed (apt-get install python3-venv)".into());
    }
    let installed = run(
        "pip install",
        clean(Command::new(&python))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(TOOLS),
    );
    if !installed {
        return Err(format!("pip could not install {}", TOOLS.join(", ")));
    }
    std::fs::write(&marker, wanted).map_err(|e| e.to_string())?;
    Ok(python)
}

#[test]
fn python_package() {
    if Command::new("python3").arg("--version").output().is_err() {
        return skip("python3 is not on the PATH");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().expect("target/tmp is in the target directory");
    let env_dir = target.join("python-venv");
    let python = match venv(&env_dir) {
        Ok(python) => python,
        Err(reason) => return skip(&reason),
    };
    let bin = env_dir.join("bin");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH joins");
    let built = run(
        "maturin develop",
        clean(Command::new(bin.join("maturin")))
            .args(["develop", "--quiet"])
            .current_dir(root.join("python"))
            .env("VIRTUAL_ENV", &env_dir)
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", target.join("python")),
    );
    assert!(built, "the Python package did not build (output above)");
    let passed = run(
        "pytest",
        clean(Command::new(&python))
            .args(["-m", "pytest", "-q", "-rs", "python/tests"])
            .current_dir(root)
            .env("PATH", &path)
            .env("DEDUP_STREAM_BIN", env!("CARGO_BIN_EXE_dedup-stream")),
    );
    assert!(passed, "pytest failed (output above)");
}
