/** Tiny DOM helpers: no framework, just elements with attributes and children. */

type AttrValue = string | number | boolean | null | undefined;
type Child = Node | string | null | undefined | false;

/** `h("div", {class: "x", "data-testid": "y"}, child, "text")` */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, AttrValue> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) setAttr(el, name, value);
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child);
  }
  return el;
}

/** Set (string/number), add (true) or remove (false/null/undefined) an attribute, only when it changes. */
export function setAttr(el: Element, name: string, value: AttrValue): void {
  if (value === null || value === undefined || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
    return;
  }
  const text = value === true ? "" : String(value);
  if (el.getAttribute(name) !== text) el.setAttribute(name, text);
}

/** Replace an element's text only when it differs (no needless layout work at 10 Hz). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

export function show(el: HTMLElement, visible: boolean): void {
  if (el.hidden === visible) el.hidden = !visible;
}

/** Read a CSS custom property where `el` sits (JupyterLab themes), with a fallback. */
export function cssVar(el: Element, name: string, fallback: string): string {
  const value = getComputedStyle(el).getPropertyValue(name).trim();
  return value || fallback;
}
