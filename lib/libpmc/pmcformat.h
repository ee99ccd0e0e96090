/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The JSON form of a pmclog(3) event, for C++ consumers such as pmc(8):
 * one object for each event, as FreeBSD's libpmc writes it.  The function
 * is libpmc's (libpmc_json.cc); the string is the caller's.
 */

#ifndef __PMCFORMAT_H_
#define __PMCFORMAT_H_

#include <string>

struct pmclog_ev;

std::string event_to_json(struct pmclog_ev *ev);

#endif
