//! Writes the CRDs of kamaji-rs to a directory (default `config/crd/bases`), one file per CRD
//! named `<group>_<plural>.yaml`. `make crds` runs it; a unit test of `kamaji-api` fails when
//! the committed files differ.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "config/crd/bases".to_owned()),
    );
    let rendered = match kamaji_api::crd::render_all() {
        Ok(rendered) => rendered,
        Err(err) => {
            eprintln!("crdgen: rendering the CRDs failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: creating {}: {err}", dir.display());
        return ExitCode::FAILURE;
    }
    for (name, yaml) in rendered {
        let path = dir.join(name);
        if let Err(err) = std::fs::write(&path, yaml) {
            eprintln!("crdgen: writing {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        println!("crdgen: wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
