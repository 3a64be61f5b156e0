/**
 * Calls to the server extension's REST API under `/nbtrain/` (nbtrain/server/handlers.py).
 *
 * Everything goes through JupyterLab's `ServerConnection`, so the token, the XSRF cookie and the base
 * URL are the page's own. Errors come back as `ApiError` with the server's message, which already says
 * what failed and what to do.
 */

import { URLExt } from "@jupyterlab/coreutils";
import { ServerConnection } from "@jupyterlab/services";

import type { ProfileCatalog } from "./profiles";
import { parseProfiles } from "./profiles";
import type { ExportResult, RunSummary } from "./wire";
import { parseErrorBody, parseExportResult, parseRunList, parseRunSummary } from "./wire";

/** A non-2xx answer of the nbtrain API: its HTTP status and the server's message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly kind: string,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

export function apiUrl(settings: ServerConnection.ISettings, ...parts: string[]): string {
  return URLExt.join(settings.baseUrl, "nbtrain", ...parts.map(encodeURIComponent));
}

/** One request to `/nbtrain/<parts>?<query>`; resolves to the parsed JSON body, rejects with `ApiError`. */
export async function requestAPI(
  settings: ServerConnection.ISettings,
  parts: string[],
  init: RequestInit = {},
  query: Readonly<Record<string, string>> = {},
): Promise<unknown> {
  const url = apiUrl(settings, ...parts) + URLExt.objectToQueryString(query);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let body: unknown = null;
  try {
    body = text === "" ? null : (JSON.parse(text) as unknown);
  } catch {
    body = null;
  }
  if (!response.ok) {
    const error = parseErrorBody(body);
    throw new ApiError(
      response.status,
      error?.error ?? "HTTPError",
      error?.message ??
        (response.status === 404
          ? "the nbtrain server extension is not enabled (jupyter server extension list should show nbtrain)."
          : `${response.status} ${response.statusText}`),
    );
  }
  return body;
}

/** The REST API as typed calls. */
export class NbtrainAPI {
  constructor(readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()) {}

  async runs(): Promise<RunSummary[]> {
    return parseRunList(await requestAPI(this.settings, ["runs"]));
  }

  async run(id: string): Promise<RunSummary> {
    return this.summary(await requestAPI(this.settings, ["runs", id]));
  }

  async cancel(id: string): Promise<RunSummary> {
    return this.summary(await requestAPI(this.settings, ["runs", id, "cancel"], { method: "POST" }));
  }

  async resume(id: string): Promise<RunSummary> {
    return this.summary(await requestAPI(this.settings, ["runs", id, "resume"], { method: "POST" }));
  }

  /** Export the notebook at `path` (relative to the server root) to a job directory beside it. */
  async exportNotebook(path: string, cell?: string): Promise<ExportResult> {
    const request = cell !== undefined ? { path, cell } : { path };
    const body = await requestAPI(this.settings, ["export"], { method: "POST", body: JSON.stringify(request) });
    const result = parseExportResult(body);
    if (result === null) throw new ApiError(500, "BadResponse", "the export endpoint answered without a job directory.");
    return result;
  }

  /** The adoption figures of `GET /nbtrain/stats` (the last 30 days; parsed by `statsLines`). */
  async stats(): Promise<unknown> {
    return requestAPI(this.settings, ["stats"]);
  }

  /** The profiles `--profile` can name (`GET /nbtrain/profiles`), with the nbtrain.toml beside the notebook `path`. */
  async profiles(path?: string): Promise<ProfileCatalog> {
    return parseProfiles(await requestAPI(this.settings, ["profiles"], {}, path !== undefined ? { path } : {}));
  }

  /** The open server-sent events response of `/nbtrain/events` (the caller reads and closes it). */
  async events(signal: AbortSignal): Promise<Response> {
    const response = await ServerConnection.makeRequest(
      apiUrl(this.settings, "events"),
      { headers: { Accept: "text/event-stream" }, signal, cache: "no-store" },
      this.settings,
    );
    if (!response.ok || response.body === null) {
      throw new ApiError(response.status, "HTTPError", `the run event stream answered ${response.status}.`);
    }
    return response;
  }

  private summary(body: unknown): RunSummary {
    const run = parseRunSummary(body);
    if (run === null) throw new ApiError(500, "BadResponse", "the server answered without a run.");
    return run;
  }
}
