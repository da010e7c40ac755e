export { AuditDeduplicator } from './dedup.js';
export {
  type AuditAction,
  type AuditEvent,
  eventBody,
  formatAuditLine,
  formatGoDuration,
  formatTimestamp,
  K8S_DEFAULT_DROP_REFERENCE,
  packetFields,
  policyReference,
  type TimeZone,
} from './format.js';
export { AuditLogger, type AuditLoggerOptions, DEFAULT_AUDIT_LOG_PATH, RotatingFileWriter, wallClockNs } from './writer.js';
