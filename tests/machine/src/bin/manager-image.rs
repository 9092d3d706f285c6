//! `manager-image`: writes the kamaji-rs manager as an OCI image-layout tar (`make release`),
//! with [`kamaji_machine::images::manager_image`]: the binary at `/manager`, the shared
//! libraries it links, user 65532, nothing else. Load it with any OCI tool, e.g.
//! `skopeo copy oci-archive:out/manager-image.tar docker://<registry>/kamaji-rs/manager:<tag>`
//! or `ctr images import out/manager-image.tar`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(
    name = "manager-image",
    about = "Write the kamaji-rs manager as an OCI image tar"
)]
struct Args {
    /// The manager binary (`target/release/manager`).
    #[arg(long)]
    binary: PathBuf,
    /// The image reference, `[registry/]repository:tag` (`ghcr.io/kamaji-rs/manager:v0.1.0`).
    #[arg(long)]
    reference: String,
    /// The tar to write.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let written =
        kamaji_machine::images::manager_image(&args.binary, &args.reference)?.write(&args.out)?;
    println!(
        "wrote {} ({} {})",
        written.path.display(),
        written.reference,
        written.manifest_digest
    );
    Ok(())
}
