import type { NormalizeResult, ValidationError } from './types.js';

/**
 * Collects the validation errors of one object while a kind's normalizer checks it; every error
 * names the object (kind, namespace when it has one, name) and a field path. Shared by the
 * normalizers of all kinds.
 */
export class Problems {
  readonly list: ValidationError[] = [];
  constructor(
    readonly kind: string,
    readonly namespace: string | undefined,
    readonly name: string,
  ) {}

  add(field: string, message: string): void {
    const e: ValidationError = { kind: this.kind, name: this.name, field, message };
    if (this.namespace !== undefined) e.namespace = this.namespace;
    this.list.push(e);
  }

  get count(): number {
    return this.list.length;
  }

  get any(): boolean {
    return this.list.length > 0;
  }
}

/** What an object yields when it yields nothing: no IR, only its errors (an invalid object yields no rules). */
export function emptyResult(errors: ValidationError[] = []): NormalizeResult {
  return { rules: [], isolations: [], groups: [], tiers: [], errors };
}

/** The JSON type of a value, for "must be X, not Y" messages. */
export function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a map';
  if (typeof v === 'boolean') return `a boolean (${v})`;
  if (typeof v === 'number') return `a number (${v})`;
  if (typeof v === 'string') return `a string (${JSON.stringify(v)})`;
  return typeof v;
}

/**
 * An integer field within [min, max] (the CRD's minimum/maximum), recording why not in `p`;
 * absent (undefined or null) is undefined with no problem: whether it is required is the caller's.
 */
export function integerInRange(p: Problems, value: unknown, field: string, min: number, max: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    p.add(field, `must be an integer, got ${JSON.stringify(value)}`);
    return undefined;
  }
  if (value < min || value > max) {
    p.add(field, `must be between ${min} and ${max}, got ${value}`);
    return undefined;
  }
  return value;
}
