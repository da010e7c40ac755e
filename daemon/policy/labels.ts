import type { LabelSelector } from './types.js';

/** Kubernetes label-selector semantics: `{}` matches everything; requirements are ANDed. */
export function matchesSelector(selector: LabelSelector, labels: Record<string, string>): boolean {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  for (const req of selector.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(labels, req.key);
    const values = req.values ?? [];
    switch (req.operator) {
      case 'In':
        if (!has || !values.includes(labels[req.key]!)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(labels[req.key]!)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

/** Why a selector is invalid, or undefined when it is valid (as the API server validates it). */
export function selectorError(selector: unknown): string | undefined {
  if (selector === null || typeof selector !== 'object') return 'must be an object';
  const s = selector as LabelSelector;
  if (s.matchLabels !== undefined && (typeof s.matchLabels !== 'object' || s.matchLabels === null)) {
    return 'matchLabels must be a map of strings';
  }
  for (const [k, v] of Object.entries(s.matchLabels ?? {})) {
    if (typeof v !== 'string') return `matchLabels.${k} must be a string`;
  }
  for (const [i, req] of (s.matchExpressions ?? []).entries()) {
    if (!req || typeof req.key !== 'string' || req.key === '') return `matchExpressions[${i}].key is required`;
    if (req.operator === 'In' || req.operator === 'NotIn') {
      if (!Array.isArray(req.values) || req.values.length === 0) {
        return `matchExpressions[${i}].values must be non-empty for operator ${req.operator}`;
      }
    } else if (req.operator === 'Exists' || req.operator === 'DoesNotExist') {
      if (req.values && req.values.length > 0) {
        return `matchExpressions[${i}].values must be empty for operator ${req.operator}`;
      }
    } else {
      return `matchExpressions[${i}].operator "${String(req.operator)}" is not one of In, NotIn, Exists, DoesNotExist`;
    }
  }
  return undefined;
}
