// Compile the unit tests (test/*.test.ts, importing the pure modules of src/) for `node --test`.
import { build } from "esbuild";
import { readdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const outdir = join(here, "build", "test");
const tests = (await readdir(join(here, "test"))).filter((name) => name.endsWith(".test.ts"));

await rm(outdir, { recursive: true, force: true });
await build({
  entryPoints: tests.map((name) => join(here, "test", name)),
  outdir,
  outExtension: { ".js": ".test.mjs" },
  entryNames: "[name]",
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node20",
  packages: "external",
  logLevel: "warning",
});
