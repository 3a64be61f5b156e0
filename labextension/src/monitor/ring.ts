/** A fixed-capacity FIFO: pushing past capacity drops the oldest items (O(1) per push). */
export class RingBuffer<T> {
  private items: (T | undefined)[];
  private head = 0; // index of the oldest item
  private size = 0;
  /** How many items were dropped because the buffer was full, since creation or the last clear. */
  evicted = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`RingBuffer capacity must be a positive integer, got ${capacity}`);
    }
    this.items = new Array<T | undefined>(capacity);
  }

  get length(): number {
    return this.size;
  }

  push(item: T): void {
    const tail = (this.head + this.size) % this.capacity;
    this.items[tail] = item;
    if (this.size < this.capacity) {
      this.size += 1;
    } else {
      this.head = (this.head + 1) % this.capacity;
      this.evicted += 1;
    }
  }

  /** Item `i` counted from the oldest (0) to the newest (length - 1). */
  at(i: number): T | undefined {
    if (i < 0 || i >= this.size) return undefined;
    return this.items[(this.head + i) % this.capacity];
  }

  last(): T | undefined {
    return this.at(this.size - 1);
  }

  toArray(): T[] {
    const out: T[] = [];
    for (let i = 0; i < this.size; i++) out.push(this.items[(this.head + i) % this.capacity] as T);
    return out;
  }

  clear(): void {
    this.items = new Array<T | undefined>(this.capacity);
    this.head = 0;
    this.size = 0;
    this.evicted = 0;
  }
}
