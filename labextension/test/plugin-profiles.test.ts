import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { DEFAULT_OPTIONS, magicLine, readLine, withMagicLine } from "../src/plugin/magic-line";
import type { ProfileInfo } from "../src/plugin/profiles";
import { chooseProfile, lockedValues, parseProfiles, presetOf } from "../src/plugin/profiles";

/** The built-in multinode-ddp as `GET /nbtrain/profiles` answers it. */
const DDP: ProfileInfo = {
  name: "multinode-ddp",
  version: "1.0",
  description: "Several nodes with DDP",
  source: "built-in multinode-ddp.toml",
  options: { "--nodes": 2, "--gpus": 8, "--strategy": "ddp", "--max-restarts": 2, "--env": { NCCL_DEBUG: "WARN" } },
  locked: ["--strategy", "--env"],
};

describe("the profiles endpoint's answer", () => {
  it("is parsed, malformed profiles dropped and unreadable sources kept with their reason", () => {
    const catalog = parseProfiles({
      profiles: [{ ...DDP }, { name: "bad name!" }, "x", { name: "bare" }],
      unreadable: [{ message: "team.toml: not valid TOML" }, { nope: 1 }],
    });
    assert.deepEqual(catalog.profiles.map((p) => p.name), ["multinode-ddp", "bare"]);
    assert.deepEqual(catalog.profiles[1], { name: "bare", version: "", description: "", source: "", options: {}, locked: [] });
    assert.deepEqual(catalog.unreadable, ["team.toml: not valid TOML"]);
    assert.deepEqual(parseProfiles(null), { profiles: [], unreadable: [] });
  });

  it("gives the dialog's fields the profile fixes, and the locked values to show", () => {
    const preset = presetOf(DDP);
    assert.deepEqual(preset.values, { nodes: 2, gpus: 8, strategy: "ddp" });
    assert.deepEqual([...preset.locked], ["strategy"]);
    assert.deepEqual(presetOf({ ...DDP, options: { "--gpus": 1000, "--backend": "ray" } }).values, {});  // out of range
    assert.deepEqual(lockedValues(DDP), ["--strategy ddp", "--env NCCL_DEBUG=WARN"]);
    assert.deepEqual(lockedValues({ ...DDP, options: { "--no-tracking": true }, locked: ["--no-tracking"] }),
      ["--no-tracking on"]);
  });
});

describe("the %%distributed line with a profile", () => {
  const preset = presetOf(DDP);

  it("names the profile and writes only what the user changed over it, never a locked field", () => {
    const chosen = chooseProfile(DEFAULT_OPTIONS, DDP).options;
    assert.equal(magicLine(chosen, [], preset), "%%distributed --profile multinode-ddp --backend local");
    assert.equal(magicLine({ ...chosen, nodes: 4 }, ["--out", "run"], preset),
      "%%distributed --profile multinode-ddp --nodes 4 --backend local --out run");
    assert.equal(magicLine({ ...chosen, strategy: "fsdp" }, [], preset),  // locked: the profile's value holds
      "%%distributed --profile multinode-ddp --backend local");
  });

  it("writes every field when the profile is not known here (the magic then checks the locks)", () => {
    assert.equal(magicLine({ ...DEFAULT_OPTIONS, profile: "team" }),
      "%%distributed --profile team --nodes 1 --gpus 1 --backend local --strategy ddp");
  });

  it("rewrites an existing line's profile and keeps its other flags", () => {
    const cell = "%%distributed --profile old --nodes 3 --name x --strategy fsdp\ntrain()";
    const chosen = chooseProfile(readLine(cell).options, DDP).options;
    assert.equal(withMagicLine(cell, chosen, preset), "%%distributed --profile multinode-ddp --backend local --name x\ntrain()");
    const none = chooseProfile(chosen, null).options;
    assert.equal(withMagicLine(cell, none), "%%distributed --nodes 2 --gpus 8 --backend local --strategy ddp --name x\ntrain()");
  });

  it("is read back with its profile and the fields the line sets itself", () => {
    const read = readLine("%%distributed --profile multinode-ddp --gpus=2\nf()");
    assert.deepEqual(read.options, { ...DEFAULT_OPTIONS, gpus: 2, profile: "multinode-ddp" });
    assert.deepEqual([...read.given], ["gpus"]);
    assert.equal(readLine("%%distributed --profile 'a b'").options.profile, undefined);
  });
});

describe("the dialog's form with a profile", () => {
  it("fills the fields the profile fixes and disables the locked ones", () => {
    const state = chooseProfile({ ...DEFAULT_OPTIONS, nodes: 5 }, DDP);
    assert.deepEqual(state.options, { nodes: 2, gpus: 8, backend: "local", strategy: "ddp", profile: "multinode-ddp" });
    assert.deepEqual([...state.disabled], ["strategy"]);
    assert.deepEqual(state.locked, ["--strategy ddp", "--env NCCL_DEBUG=WARN"]);
    assert.match(state.hint, /^Several nodes with DDP \(version 1\.0; built-in multinode-ddp\.toml\)$/);
  });

  it("keeps the line's own values over the profile's unlocked ones, but not over a lock", () => {
    const read = readLine("%%distributed --profile multinode-ddp --nodes 3 --strategy fsdp");
    const state = chooseProfile(read.options, DDP, read.given);
    assert.equal(state.options.nodes, 3);
    assert.equal(state.options.gpus, 8);
    assert.equal(state.options.strategy, "ddp");
  });

  it("enables every field again for no profile, keeping their values", () => {
    const state = chooseProfile(chooseProfile(DEFAULT_OPTIONS, DDP).options, null);
    assert.deepEqual(state.options, { nodes: 2, gpus: 8, backend: "local", strategy: "ddp" });
    assert.equal(state.disabled.size, 0);
    assert.deepEqual(state.locked, []);
    assert.equal(state.preset, undefined);
  });
});
