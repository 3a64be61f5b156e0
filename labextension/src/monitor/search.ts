/**
 * Whole-log search: the filter box matches only the lines the browser holds; "Search whole log" asks the
 * nbtrain server extension (`GET <base>/nbtrain/runs/<id>/search?q=…`, nbtrain/server/logsearch.py), which
 * reads every line of the run's logs on disk, and lists the matches with their rank and line number,
 * paged ("More"). Needs Jupyter Server with the nbtrain extension (JupyterLab, Notebook 7); elsewhere it
 * says so.
 */

import { h, setText, show } from "./dom";
import type { Tab } from "./logs";

export interface SearchHit {
  rank: number;
  line: number;
  text: string;
}

export interface SearchCursor {
  rank: number;
  line: number;
}

export interface SearchAnswer {
  matches: SearchHit[];
  next: SearchCursor | null;
  scanned: number;
}

/** One page of a search: `ranks` null means every rank. */
export type Searcher = (query: string, ranks: number[] | null, from: SearchCursor | null) => Promise<SearchAnswer>;

interface ServerConfig {
  baseUrl: string;
  token: string;
}

/** Where the Jupyter server is, from the page's `jupyter-config-data` (JupyterLab and Notebook 7 pages). */
function serverConfig(): ServerConfig | null {
  const data = document.getElementById("jupyter-config-data")?.textContent;
  if (!data) return null;
  try {
    const config = JSON.parse(data) as Record<string, unknown>;
    const baseUrl = typeof config["baseUrl"] === "string" ? config["baseUrl"] : "/";
    return { baseUrl: baseUrl.endsWith("/") ? baseUrl : `${baseUrl}/`, token: typeof config["token"] === "string" ? config["token"] : "" };
  } catch {
    return null;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Check the server's answer once (a stale page may talk to a newer server). */
export function parseAnswer(body: unknown): SearchAnswer {
  if (!isObject(body) || !Array.isArray(body["matches"])) throw new Error("the server's answer has no matches");
  const matches = body["matches"].filter(isObject).map((m) => ({
    rank: Number(m["rank"]),
    line: Number(m["line"]),
    text: typeof m["text"] === "string" ? m["text"] : "",
  }));
  const next = isObject(body["next"]) ? { rank: Number(body["next"]["rank"]), line: Number(body["next"]["line"]) } : null;
  return { matches, next, scanned: Number(body["scanned"] ?? 0) };
}

/** A Searcher over the REST API of the page's Jupyter server, for run `runId`. */
export function restSearcher(runId: string): Searcher {
  return async (query, ranks, from) => {
    const config = serverConfig();
    if (config === null) throw new Error("whole-log search needs JupyterLab or Notebook 7 with the nbtrain server extension");
    const params = new URLSearchParams({ q: query, limit: "200" });
    if (ranks !== null) params.set("ranks", ranks.join(","));
    if (from !== null) {
      params.set("rank", String(from.rank));
      params.set("line", String(from.line));
    }
    const headers: Record<string, string> = config.token ? { Authorization: `token ${config.token}` } : {};
    const url = `${config.baseUrl}nbtrain/runs/${encodeURIComponent(runId)}/search?${params.toString()}`;
    const response = await fetch(url, { headers, credentials: "same-origin" });
    const body = (await response.json().catch(() => null)) as unknown;
    if (!response.ok) {
      const text = isObject(body) && typeof body["message"] === "string" ? body["message"] : response.statusText;
      throw new Error(`the server answered ${response.status}: ${text}`);
    }
    return parseAnswer(body);
  };
}

/** The results box under the log toolbar. */
export class SearchView {
  readonly el: HTMLElement;
  private readonly title = h("span", { class: "nbtrain-muted" });
  private readonly list = h("div", { class: "nbtrain-search-list", "data-testid": "nbtrain-log-search-hits" });
  private readonly more = h("button", { type: "button", class: "nbtrain-button", "data-testid": "nbtrain-log-search-more" }, "More");
  private readonly close = h("button", { type: "button", class: "nbtrain-button", title: "Close the search results" }, "Close");
  private query = "";
  private ranks: number[] | null = null;
  private next: SearchCursor | null = null;
  private found = 0;
  private ticket = 0;

  constructor(private readonly search: Searcher) {
    this.el = h(
      "div",
      { class: "nbtrain-search", "data-testid": "nbtrain-log-search", hidden: true },
      h("div", { class: "nbtrain-log-toolbar" }, this.title, this.more, this.close),
      this.list,
    );
    this.more.addEventListener("click", () => void this.page());
    this.close.addEventListener("click", () => {
      this.ticket++;
      show(this.el, false);
    });
  }

  /** Search `query` in the whole log of `tab` (a rank, or every rank for the merged tab). */
  async start(query: string, tab: Tab): Promise<void> {
    this.query = query.trim();
    if (!this.query) return;
    this.ranks = tab === "merged" ? null : [tab];
    this.next = null;
    this.found = 0;
    this.list.replaceChildren();
    show(this.el, true);
    await this.page(true);
  }

  private where(): string {
    return this.ranks === null ? "every rank's log" : `rank ${this.ranks[0]}'s log`;
  }

  private async page(first = false): Promise<void> {
    const ticket = ++this.ticket;
    this.more.disabled = true;
    setText(this.title, `Searching ${this.where()} on disk for “${this.query}”…`);
    let answer: SearchAnswer;
    try {
      answer = await this.search(this.query, this.ranks, first ? null : this.next);
    } catch (error) {
      if (ticket === this.ticket) setText(this.title, `Search failed: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    if (ticket !== this.ticket) return;
    this.next = answer.next;
    this.found += answer.matches.length;
    this.list.append(
      ...answer.matches.map((hit) =>
        h("div", { class: "nbtrain-search-hit" }, h("span", { class: "nbtrain-search-where" }, `[${hit.rank}] line ${hit.line + 1}: `), hit.text),
      ),
    );
    const n = this.found;
    const tail = answer.next === null ? "" : " so far (more on disk)";
    setText(this.title, `${n.toLocaleString()} line${n === 1 ? "" : "s"} of ${this.where()} on disk contain “${this.query}”${tail}`);
    this.more.disabled = false;
    show(this.more, answer.next !== null);
  }
}
