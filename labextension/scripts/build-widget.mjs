// Bundle the monitor widget into the Python package: nbtrain/widgets/static/monitor.{js,css}.
// One ES module (anywidget's AFM, `export default { render }`) with uPlot inside, and one CSS file
// (uPlot's CSS + ours). The output is committed so users never build.
import { build } from "esbuild";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const out = join(here, "..", "nbtrain", "widgets", "static");
const banner = "nbtrain monitor widget. Built from labextension/src/monitor by `npm run build:widget` in labextension/; do not edit.";

// uPlot's notice survives minification (its header is not a /*! legal comment)
const uplotHeader = (await readFile(join(here, "node_modules", "uplot", "dist", "uPlot.esm.js"), "utf8")).match(/^\/\*\*[\s\S]*?\*\//);
const uplotNotice = uplotHeader ? uplotHeader[0].replace(/^\/\*\*/, "/*!") : "/*! uPlot (MIT License) https://github.com/leeoniya/uPlot */";

await mkdir(out, { recursive: true });
const result = await build({
  entryPoints: [join(here, "src", "monitor", "index.ts")],
  outfile: join(out, "monitor.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  minify: true,
  legalComments: "eof",
  banner: { js: `// ${banner}\n${uplotNotice}` },
  metafile: true,
  logLevel: "warning",
});

const css = [
  `/* ${banner} */`,
  "/* uPlot (MIT License, https://github.com/leeoniya/uPlot) */",
  (await readFile(join(here, "node_modules", "uplot", "dist", "uPlot.min.css"), "utf8")).trim(),
  (await readFile(join(here, "src", "monitor", "monitor.css"), "utf8")).trim(),
  "",
].join("\n");
await writeFile(join(out, "monitor.css"), css);

const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
console.log(`monitor.js ${(bytes / 1024).toFixed(1)} KiB, monitor.css ${(css.length / 1024).toFixed(1)} KiB -> ${out}`);
