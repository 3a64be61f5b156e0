/**
 * The browser's view of every run: one per page, shared by the runs panel, the status bar and the
 * commands.
 *
 * Live by the server-sent event stream `/nbtrain/events` (changed run summaries, a keep-alive every
 * second). When the stream cannot be opened or goes quiet, the model polls `GET /nbtrain/runs`
 * instead and tries the stream again with a growing delay. A full list is also fetched every minute
 * while streaming, so runs deleted from the store disappear.
 */

import type { IDisposable } from "@lumino/disposable";
import type { ISignal } from "@lumino/signaling";
import { Signal } from "@lumino/signaling";

import type { NbtrainAPI } from "./api";
import { EventStreamParser } from "./sse";
import type { RunSummary } from "./wire";
import { isActive, parseRunList } from "./wire";

/** How the model is kept current: `stream` (server-sent events), `polling` (fallback) or `offline`. */
export type Connection = "connecting" | "stream" | "polling" | "offline";

export interface RunsModelOptions {
  api: NbtrainAPI;
  /** Poll period while the stream is down (ms). */
  pollMs?: number;
  /** A stream silent this long (ms) is dropped and re-opened; the server sends a keep-alive every second. */
  quietMs?: number;
  /** Full refresh period while streaming (ms). */
  refreshMs?: number;
  /** Longest delay between two attempts to re-open the stream (ms). */
  maxRetryMs?: number;
  /** Never open the stream: poll only (for servers or proxies that buffer event streams). */
  pollOnly?: boolean;
}

interface Row {
  run: RunSummary;
  /** Browser time (s) the row arrived: live durations count on from there. */
  receivedAt: number;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

export class RunsModel implements IDisposable {
  readonly api: NbtrainAPI;
  private readonly pollMs: number;
  private readonly quietMs: number;
  private readonly refreshMs: number;
  private readonly maxRetryMs: number;
  private readonly pollOnly: boolean;
  private readonly rows = new Map<string, Row>();
  private readonly stop = new AbortController();
  private readonly _changed = new Signal<this, void>(this);
  private _connection: Connection = "connecting";
  private _error: string | null = null;
  private _loaded = false;
  private started = false;

  constructor(options: RunsModelOptions) {
    this.api = options.api;
    this.pollMs = options.pollMs ?? 3000;
    this.quietMs = options.quietMs ?? 15000;
    this.refreshMs = options.refreshMs ?? 60000;
    this.maxRetryMs = options.maxRetryMs ?? 60000;
    this.pollOnly = options.pollOnly ?? false;
  }

  /** Emitted after the runs, the connection or the error changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get connection(): Connection {
    return this._connection;
  }

  /** The last error talking to the server (null once a request succeeds again). */
  get error(): string | null {
    return this._error;
  }

  /** True once the first list arrived. */
  get loaded(): boolean {
    return this._loaded;
  }

  get isDisposed(): boolean {
    return this.stopped();
  }

  /** A call, not a property, so that checks after an `await` are not narrowed away by the compiler. */
  private stopped(): boolean {
    return this.stop.signal.aborted;
  }

  /** Every run, newest first. */
  get runs(): RunSummary[] {
    return [...this.rows.values()].map((row) => row.run).sort((a, b) => b.created - a.created);
  }

  get activeCount(): number {
    let count = 0;
    for (const row of this.rows.values()) if (isActive(row.run.state)) count++;
    return count;
  }

  get(id: string): RunSummary | undefined {
    return this.rows.get(id)?.run;
  }

  /** When (browser seconds) the current row of `id` arrived. */
  receivedAt(id: string): number {
    return this.rows.get(id)?.receivedAt ?? Date.now() / 1000;
  }

  /** Start following the server (idempotent). */
  start(): void {
    if (this.started || this.isDisposed) return;
    this.started = true;
    void this.follow();
  }

  /** Fetch the whole list now; runs no longer listed are dropped. */
  async refresh(): Promise<void> {
    const runs = await this.api.runs();
    const now = Date.now() / 1000;
    this.rows.clear();
    for (const run of runs) this.rows.set(run.id, { run, receivedAt: now });
    this._loaded = true;
    this._error = null;
    this._changed.emit();
  }

  /** Replace the rows of these runs (from an event, or from a cancel/resume answer). */
  update(runs: readonly RunSummary[]): void {
    if (runs.length === 0) return;
    const now = Date.now() / 1000;
    for (const run of runs) this.rows.set(run.id, { run, receivedAt: now });
    this._changed.emit();
  }

  dispose(): void {
    if (this.isDisposed) return;
    this.stop.abort();
    Signal.clearData(this);
  }

  private setConnection(connection: Connection, error: string | null = this._error): void {
    if (connection === this._connection && error === this._error) return;
    this._connection = connection;
    this._error = error;
    this._changed.emit();
  }

  /** The life of the model: stream while possible, poll in between. */
  private async follow(): Promise<void> {
    let retryMs = 2000;
    while (!this.stopped()) {
      if (!this.pollOnly) {
        const streamed = await this.streamOnce();
        if (this.stopped()) return;
        if (streamed) retryMs = 2000; // it worked for a while: retry soon
      }
      // the stream is down (or disabled): poll until the next attempt
      const until = Date.now() + (this.pollOnly ? Number.POSITIVE_INFINITY : retryMs);
      do {
        try {
          await this.refresh();
          this.setConnection("polling", null);
        } catch (error) {
          this.setConnection("offline", (error as Error).message);
        }
        await sleep(this.pollMs, this.stop.signal);
      } while (!this.stopped() && Date.now() < until);
      retryMs = Math.min(this.maxRetryMs, retryMs * 2);
    }
  }

  /** Open the stream and apply its events until it ends; true when at least one event arrived. */
  private async streamOnce(): Promise<boolean> {
    const abort = new AbortController();
    const onStop = (): void => abort.abort();
    this.stop.signal.addEventListener("abort", onStop, { once: true });
    let received = false;
    let quiet: ReturnType<typeof setTimeout> | undefined;
    let refresh: ReturnType<typeof setInterval> | undefined;
    const arm = (): void => {
      clearTimeout(quiet);
      quiet = setTimeout(() => abort.abort(), this.quietMs);
    };
    try {
      arm();
      await this.refresh();
      const response = await this.api.events(abort.signal);
      const body = response.body;
      if (body === null) return false;
      const reader = body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = new EventStreamParser();
      this.setConnection("stream", null);
      refresh = setInterval(() => void this.refresh().catch(() => undefined), this.refreshMs);
      for (;;) {
        arm();
        const { value, done } = await reader.read();
        if (done) break;
        for (const data of parser.push(value)) {
          received = true;
          try {
            this.update(parseRunList(JSON.parse(data) as unknown));
          } catch {
            // a malformed event is skipped; the next full refresh repairs the list
          }
        }
      }
      await reader.cancel().catch(() => undefined);
    } catch (error) {
      if (!this.stopped() && !abort.signal.aborted) this._error = (error as Error).message;
    } finally {
      clearTimeout(quiet);
      clearInterval(refresh);
      this.stop.signal.removeEventListener("abort", onStop);
      abort.abort();
    }
    return received;
  }
}
