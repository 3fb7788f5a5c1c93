//! A TCP proxy whose backend is switched while it runs, for tests that move a client from one
//! kube-apiserver to another without restarting it:
//!
//!     switch_proxy LISTEN_ADDR TARGET_FILE
//!
//! Each accepted connection goes to the address TARGET_FILE holds (`host:port`). The file is
//! read again every 100 ms; when it names another address, every open connection is closed, so
//! the client reconnects, now to the new backend. Bytes pass through untouched (TLS included).
//! Runs until killed.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

fn target(file: &str) -> Result<String> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    let text = text.trim();
    if text.is_empty() {
        bail!("{file} names no backend");
    }
    Ok(text.to_string())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, file] = args.as_slice() else {
        bail!("usage: switch_proxy LISTEN_ADDR TARGET_FILE");
    };
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let (switch, backend) = watch::channel(target(file)?);
    let file = file.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Ok(now) = target(&file) {
                if *switch.borrow() != now {
                    eprintln!("switch_proxy: connections now go to {now}");
                    switch.send_replace(now);
                }
            }
        }
    });
    loop {
        let (mut inbound, _) = listener.accept().await?;
        let mut backend = backend.clone();
        let to = backend.borrow_and_update().clone();
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(&to).await else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                // Switched: close, and the client's next connection goes to the new backend.
                _ = backend.changed() => {}
            }
        });
    }
}
