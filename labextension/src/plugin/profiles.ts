/**
 * Profiles in the "Run cell distributed…" dialog (pure): the wire model of `GET /nbtrain/profiles`
 * (nbtrain/server/profiles.py), what a chosen profile does to the dialog's four fields (fills the ones it
 * fixes, disables the ones it locks), and the locked values the dialog shows.
 */

import type { DistributedOptions, FieldName, Preset } from "./magic-line";
import { BACKENDS, FIELD_FLAGS, FIELDS, LIMITS, PROFILE_NAME, STRATEGIES } from "./magic-line";

/** One profile of `GET /nbtrain/profiles`: `options` keyed by flag (TOML values), `locked` flags. */
export interface ProfileInfo {
  name: string;
  version: string;
  description: string;
  source: string;
  options: Readonly<Record<string, unknown>>;
  locked: readonly string[];
}

/** The endpoint's answer: the profiles, and the reasons of the sources that failed to load. */
export interface ProfileCatalog {
  profiles: ProfileInfo[];
  unreadable: string[];
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function parseProfile(value: unknown): ProfileInfo | null {
  if (!isObject(value) || typeof value.name !== "string" || !PROFILE_NAME.test(value.name)) return null;
  const locked = Array.isArray(value.locked) ? value.locked.filter((f): f is string => typeof f === "string") : [];
  return {
    name: value.name,
    version: text(value.version),
    description: text(value.description),
    source: text(value.source),
    options: isObject(value.options) ? value.options : {},
    locked,
  };
}

/** The catalog of `{"profiles": [...], "unreadable": [{"message"}]}`; malformed profiles are dropped. */
export function parseProfiles(value: unknown): ProfileCatalog {
  if (!isObject(value)) return { profiles: [], unreadable: [] };
  const profiles = Array.isArray(value.profiles)
    ? value.profiles.map(parseProfile).filter((p): p is ProfileInfo => p !== null)
    : [];
  const unreadable = Array.isArray(value.unreadable)
    ? value.unreadable.map((u) => (isObject(u) ? text(u.message) : "")).filter((m) => m !== "")
    : [];
  return { profiles, unreadable };
}

function fieldValue(field: FieldName, value: unknown): DistributedOptions[FieldName] | undefined {
  if (field === "nodes" || field === "gpus") {
    const { min, max } = LIMITS[field];
    return typeof value === "number" && Number.isInteger(value) && value >= min && value <= max ? value : undefined;
  }
  const choices: readonly string[] = field === "backend" ? BACKENDS : STRATEGIES;
  return typeof value === "string" && choices.includes(value) ? (value as DistributedOptions[FieldName]) : undefined;
}

/** What `profile` fixes among the dialog's fields (values it sets that the dialog can show, and its locks). */
export function presetOf(profile: ProfileInfo): Preset {
  const values: Partial<Record<FieldName, unknown>> = {};
  const locked = new Set<FieldName>();
  for (const field of FIELDS) {
    const flag = FIELD_FLAGS[field];
    const value = fieldValue(field, profile.options[flag]);
    if (value === undefined) continue;
    values[field] = value;
    if (profile.locked.includes(flag)) locked.add(field);
  }
  return { values: values as Preset["values"], locked };
}

function shown(value: unknown): string {
  if (value === true) return "on";
  if (value === false) return "off";
  if (Array.isArray(value)) return value.map(shown).join(" ");
  if (isObject(value)) return Object.entries(value).map(([k, v]) => `${k}=${shown(v)}`).join(" ");
  return String(value);
}

/** Every option `profile` locks, as `--strategy ddp` (switches: `--no-tracking on`), in the profile's order. */
export function lockedValues(profile: ProfileInfo): string[] {
  return Object.keys(profile.options)
    .filter((flag) => profile.locked.includes(flag))
    .map((flag) => `${flag} ${shown(profile.options[flag])}`);
}

/** What the dialog shows for a choice of profile: its fields, which are disabled, the locks and a hint. */
export interface FormState {
  options: DistributedOptions;
  disabled: ReadonlySet<FieldName>;
  preset?: Preset;
  locked: string[];
  hint: string;
}

/**
 * The dialog after choosing `profile` (null: none) with the fields at `current`: the profile's values fill the
 * fields it fixes, except those in `keep` that it does not lock (the user's own choices: flags of the cell's line);
 * the locked ones are disabled. Choosing none keeps the fields as they are and enables them all.
 */
export function chooseProfile(current: DistributedOptions, profile: ProfileInfo | null,
  keep: ReadonlySet<FieldName> = new Set()): FormState {
  if (profile === null) {
    const options = { ...current };
    delete options.profile;
    return { options, disabled: new Set(), locked: [], hint: "Start from no profile: nbtrain's defaults." };
  }
  const preset = presetOf(profile);
  const options: DistributedOptions = { ...current, profile: profile.name };
  for (const field of FIELDS) {
    const value = preset.values[field];
    if (value !== undefined && (preset.locked.has(field) || !keep.has(field))) {
      (options as unknown as Record<FieldName, unknown>)[field] = value;
    }
  }
  const about = profile.description !== "" ? profile.description : `profile ${profile.name}`;
  return {
    options,
    disabled: preset.locked,
    preset,
    locked: lockedValues(profile),
    hint: `${about} (version ${profile.version}; ${profile.source})`,
  };
}
