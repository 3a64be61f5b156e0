// Build the JupyterLab extension into the Python package: nbtrain/labextension/ (the prebuilt
// extension that pip installs to share/jupyter/labextensions/nbtrain).
//  1. esbuild bundles src/plugin/ into lib/plugin.js, leaving every package import (@jupyterlab/*,
//     @lumino/*) as an import: those are JupyterLab's shared singletons, never bundled.
//  2. @jupyter/builder (rspack + module federation) turns lib/plugin.js, style/ and schema/ into the
//     federated extension, against JupyterLab's core metadata from @jupyterlab/core-meta. No Python
//     needed, so this also runs inside the wheel build (hatch-jupyter-builder).
// `--development` keeps the bundle readable and adds source maps.
import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const require = createRequire(import.meta.url);
const development = process.argv.includes("--development");

await build({
  entryPoints: [join(here, "src", "plugin", "index.ts")],
  outfile: join(here, "lib", "plugin.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2020"],
  packages: "external",
  sourcemap: development,
  logLevel: "warning",
});

const builder = require.resolve("@jupyter/builder/lib/build-labextension.js");
const core = require.resolve("@jupyterlab/core-meta/core.package.json");
const args = [builder, "--core-package-file", core, ...(development ? ["--development"] : []), here];
const result = spawnSync(process.execPath, args, { cwd: here, stdio: "inherit" });
process.exit(result.status ?? 1);
