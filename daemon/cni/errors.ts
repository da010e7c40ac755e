import type { CniFailure } from '../../cni/protocol.js';

/**
 * A failure with a CNI error code, thrown by request validation and by CniHandler methods; the
 * server sends code/msg/details to the plugin unchanged, which prints them as the CNI error object.
 */
export class CniError extends Error {
  constructor(
    public code: number,
    msg: string,
    public details?: string,
  ) {
    super(msg);
    this.name = 'CniError';
  }

  static from(failure: CniFailure): CniError {
    return new CniError(failure.code, failure.msg, failure.details);
  }
}
