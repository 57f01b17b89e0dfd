/* SPDX-License-Identifier: MIT */
/*
 * t_fds.h - how many descriptors this process holds, for the tests that
 * check a call leaks none. No Criterion here, so the fuzz harnesses use it
 * too.
 */
#ifndef T_FDS_H
#define T_FDS_H

/* The entries of /proc/self/fd (its own listing's descriptor, "." and ".."
 * included, so only a difference means anything): any leak shows, not only
 * the lowest free number (a leaked one above a hole would not move that).
 * -errno when the folder cannot be read. */
int t_fds_open(void);

#endif /* T_FDS_H */
