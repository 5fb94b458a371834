//! The report and the live page in a real browser: headless Chromium
//! driven over WebDriver (`chromedriver`, Debian's `chromium-driver`) with
//! fantoccini. Each page must load with no error on the browser's console
//! and show the counts the output holds; a screenshot of each is written to
//! `target/browser/` for people to look at.
//!
//! Without `chromium` and `chromedriver` the tests print `SKIPPED` and pass,
//! unless `DEDUP_REQUIRE_BROWSER=1` (which CI sets).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::served::Served;
use fantoccini::{Client, ClientBuilder, Locator};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// `None` (having said why) when the browser is missing and not required.
fn browser_present() -> bool {
    if Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists() {
        return true;
    }
    assert!(
        !std::env::var("DEDUP_REQUIRE_BROWSER").is_ok_and(|v| v == "1"),
        "the browser tests are required (DEDUP_REQUIRE_BROWSER=1): {CHROMIUM} or {CHROMEDRIVER} is missing"
    );
    common::skipped("browser", "chromium or chromedriver is not installed");
    false
}

/// `chromedriver` on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn driver() -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--window-size=1100,1300", "--hide-scrollbars"]
        }),
    );
    caps.insert(
        "goog:loggingPrefs".into(),
        serde_json::json!({"browser": "ALL"}),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

/// The browser console's entries since the last call (chromedriver's log
/// endpoint, which WebDriver itself does not define).
async fn console(driver: &Driver, client: &Client) -> Vec<serde_json::Value> {
    let session = client.session_id().await.unwrap().unwrap();
    let out = Command::new("curl")
        .args([
            "-sS",
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"type":"browser"}"#,
        ])
        .arg(format!("{}/session/{session}/se/log", driver.url))
        .output()
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON answer");
    answer["value"].as_array().cloned().unwrap_or_default()
}

/// Where screenshots go: `target/browser/`.
fn shots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("browser");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn text_of(client: &Client, id: &str) -> String {
    client
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Checks the page has loaded without a console error, and saves its
/// screenshot.
async fn clean_and_shot(driver: &Driver, client: &Client, name: &str) {
    let errors: Vec<_> = console(driver, client)
        .await
        .into_iter()
        .filter(|e| e["level"] == "SEVERE" || e["level"] == "WARNING")
        .collect();
    assert!(
        errors.is_empty(),
        "console errors on the {name}: {errors:#?}"
    );
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    std::fs::write(shots().join(format!("{name}.png")), png).unwrap();
}

#[test]
fn the_report_loads_and_shows_the_counts() {
    if !browser_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tagged = common::run(
        &[
            "--quiet",
            "--explain",
            common::fixture("retweet_storm.jsonl").to_str().unwrap(),
            common::fixture("explain.jsonl").to_str().unwrap(),
        ],
        b"",
    );
    assert!(tagged.status.success());
    let text = String::from_utf8(tagged.stdout.clone()).unwrap();
    let duplicates = text.matches(r#""status":"duplicate""#).count();
    let new = text.matches(r#""status":"new""#).count();
    assert!(duplicates > 0 && new > 0);
    let path = dir.path().join("tagged.jsonl");
    std::fs::write(&path, &tagged.stdout).unwrap();
    let page = shots().join("report.html");
    let _ = std::fs::remove_file(&page);
    let out = common::run(
        &[
            "report",
            path.to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let driver = driver();
    runtime.block_on(async {
        let client = browser(&driver).await;
        // The console is read indeed: an error on a page of ours is seen.
        client
            .goto("data:text/html,<script>console.error('seen')</script>")
            .await
            .unwrap();
        let seen = console(&driver, &client).await;
        assert!(
            seen.iter().any(|e| e["level"] == "SEVERE"),
            "the console check sees nothing: {seen:?}"
        );
        client
            .goto(&format!("file://{}", page.display()))
            .await
            .unwrap();
        assert_eq!(text_of(&client, "duplicates").await, duplicates.to_string());
        assert_eq!(text_of(&client, "new").await, new.to_string());
        assert_eq!(
            text_of(&client, "messages").await,
            (duplicates + new).to_string()
        );
        // The charts are drawn: as many bars as bins, a threshold line.
        let bars = client
            .find_all(Locator::Css("#histogram rect"))
            .await
            .unwrap();
        assert_eq!(bars.len(), 40);
        client.find(Locator::Id("threshold")).await.unwrap();
        clean_and_shot(&driver, &client, "report").await;
        client.close().await.unwrap();
    });
}

#[test]
fn the_live_page_loads_and_shows_the_counts() {
    if !browser_present() {
        return;
    }
    let mut served = Served::start(&["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]);
    let tcp = served.tcp_addr().to_string();
    let line = served.wait_for("admin endpoint listening address=");
    let admin = line.rsplit("address=").next().unwrap().trim().to_string();
    // The retweet storm, over the line protocol.
    let input = std::fs::read(common::fixture("retweet_storm.jsonl")).unwrap();
    let mut stream = TcpStream::connect(&tcp).unwrap();
    stream.write_all(&input).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut replies = String::new();
    stream.read_to_string(&mut replies).unwrap();
    let duplicates = replies.matches(r#""status":"duplicate""#).count();
    let decided = duplicates + replies.matches(r#""status":"new""#).count();
    assert!(duplicates > 0);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let driver = driver();
    runtime.block_on(async {
        let client = browser(&driver).await;
        client.goto(&format!("http://{admin}/")).await.unwrap();
        assert_eq!(text_of(&client, "decided").await, decided.to_string());
        assert_eq!(text_of(&client, "duplicates").await, duplicates.to_string());
        // The storm's cluster leads the table.
        let rows = client.find_all(Locator::Css("#clusters tr")).await.unwrap();
        assert!(rows.len() >= 2, "a header and a cluster");
        // It reloads itself: still there, still right, after a reload.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(text_of(&client, "decided").await, decided.to_string());
        clean_and_shot(&driver, &client, "live").await;
        client.close().await.unwrap();
    });
}
