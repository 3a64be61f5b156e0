import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  BACKENDS, DEFAULT_OPTIONS, isDistributedCell, LIMITS, loadsExtension, magicLine, readOptions, splitArgs, STRATEGIES, withMagicLine,
} from "../src/plugin/magic-line";
import { JOB_OPTIONS } from "../src/plugin/options.generated";

const TWO_BY_EIGHT = { nodes: 2, gpus: 8, backend: "kubernetes", strategy: "fsdp" } as const;

describe("the %%distributed line", () => {
  it("is written in a fixed order with every flag the dialog edits", () => {
    assert.equal(magicLine(DEFAULT_OPTIONS), "%%distributed --nodes 1 --gpus 1 --backend local --strategy ddp");
    assert.equal(magicLine(TWO_BY_EIGHT, ["--out", "run"]),
      "%%distributed --nodes 2 --gpus 8 --backend kubernetes --strategy fsdp --out run");
  });

  it("clamps counts to the magic's ranges", () => {
    assert.equal(magicLine({ ...DEFAULT_OPTIONS, nodes: 0, gpus: 1000 }),
      "%%distributed --nodes 1 --gpus 64 --backend local --strategy ddp");
    assert.equal(magicLine({ ...DEFAULT_OPTIONS, nodes: Number.NaN, gpus: 2.6 }),
      "%%distributed --nodes 1 --gpus 3 --backend local --strategy ddp");
  });

  it("goes on top of a cell without one", () => {
    assert.equal(withMagicLine("x = 1\nprint(x)", DEFAULT_OPTIONS),
      "%%distributed --nodes 1 --gpus 1 --backend local --strategy ddp\nx = 1\nprint(x)");
    assert.equal(withMagicLine("", DEFAULT_OPTIONS), "%%distributed --nodes 1 --gpus 1 --backend local --strategy ddp");
  });

  it("replaces an existing line's four flags and keeps the others in order", () => {
    const cell = "%%distributed --name digits --nodes=4 --gpus 2 --out run --env A=1 --strategy deepspeed\ntrain()";
    assert.equal(withMagicLine(cell, TWO_BY_EIGHT),
      "%%distributed --nodes 2 --gpus 8 --backend kubernetes --strategy fsdp --name digits --out run --env A=1\ntrain()");
    assert.equal(withMagicLine("%%distributed", TWO_BY_EIGHT),
      "%%distributed --nodes 2 --gpus 8 --backend kubernetes --strategy fsdp");
  });

  it("keeps quoted values whole", () => {
    assert.deepEqual(splitArgs(`%%distributed --env "A=a b" --name 'x y' --gpus 2`),
      ["%%distributed", "--env", '"A=a b"', "--name", "'x y'", "--gpus", "2"]);
    assert.equal(withMagicLine(`%%distributed --env "A=a b" --gpus 4\nf()`, DEFAULT_OPTIONS),
      `%%distributed --nodes 1 --gpus 1 --backend local --strategy ddp --env "A=a b"\nf()`);
  });

  it("does not mistake another magic for it", () => {
    assert.equal(withMagicLine("%%distributedx\nf()", DEFAULT_OPTIONS).split("\n")[1], "%%distributedx");
    assert.deepEqual(readOptions("%%time\nf()"), DEFAULT_OPTIONS);
  });
});

describe("the dialog's starting values", () => {
  it("come from the cell's line", () => {
    assert.deepEqual(readOptions("%%distributed --nodes 2 --gpus=8 --backend kubernetes --strategy fsdp\nf()"), TWO_BY_EIGHT);
  });

  it("fall back to the defaults for missing or unknown values", () => {
    assert.deepEqual(readOptions("f()"), DEFAULT_OPTIONS);
    assert.deepEqual(readOptions("%%distributed --backend ray --strategy zero --gpus lots"),
      { ...DEFAULT_OPTIONS, gpus: 1 });
  });
});

describe("the dialog's choices", () => {
  it("are the magic's own, from the generated table of options", () => {
    assert.deepEqual([...BACKENDS], JOB_OPTIONS.backends.map((backend) => backend.name));
    assert.deepEqual([...STRATEGIES], ["ddp", "fsdp", "deepspeed"]);
    assert.deepEqual(LIMITS, { nodes: { min: 1, max: 1024 }, gpus: { min: 0, max: 64 } });
    assert.deepEqual(DEFAULT_OPTIONS, { nodes: 1, gpus: 1, backend: "local", strategy: "ddp" });
  });

  it("let --gpus 0 through (one CPU process per node), as the magic does", () => {
    assert.equal(readOptions("%%distributed --gpus 0").gpus, 0);
    assert.equal(magicLine({ ...DEFAULT_OPTIONS, gpus: 0 }), "%%distributed --nodes 1 --gpus 0 --backend local --strategy ddp");
  });

  it("mark which backends honour each option", () => {
    assert.deepEqual(JOB_OPTIONS.options["--namespace"].backends, ["kubernetes"]);
    assert.deepEqual(JOB_OPTIONS.options["--max-restarts"].backends, ["local", "kubernetes", "slurm"]);  // k8s: with --volume
    assert.deepEqual(JOB_OPTIONS.options["--volume"].backends, ["kubernetes"]);
    assert.deepEqual(JOB_OPTIONS.options["--hang-timeout"].backends, ["local", "slurm"]);
    assert.equal(JOB_OPTIONS.options["--name"].backends, null);
  });
});

describe("isDistributedCell", () => {
  it("is the cell export picks when the user is on it", () => {
    assert.equal(isDistributedCell("%%distributed --nodes 2\nx = 1"), true);
    assert.equal(isDistributedCell("  %%distributed"), true);
    assert.equal(isDistributedCell("x = 1\n%%distributed"), false);
    assert.equal(isDistributedCell("%%distributedx"), false);
  });
});

describe("loadsExtension", () => {
  it("finds %load_ext nbtrain on a line of its own", () => {
    assert.equal(loadsExtension(["import os", "%load_ext nbtrain"]), true);
    assert.equal(loadsExtension(["x = 1\n  %load_ext autoreload nbtrain\n"]), true);
    assert.equal(loadsExtension(["%load_ext nbtrain_extra", "# %load_ext nbtrain", "print('%load_ext nbtrain')"]), false);
  });
});
