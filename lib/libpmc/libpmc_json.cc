/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * event_to_json() of <pmcformat.h>: the C++ door to the JSON form of a
 * pmclog(3) event.  libpmc_json.rs writes the text; this file hands it
 * over as the std::string of the C++ library the caller was built with,
 * and stops the program on an event type with no JSON form, as FreeBSD's
 * libpmc does.
 */

#include <sys/types.h>

#include <err.h>
#include <stddef.h>
#include <sysexits.h>

#include <string>

#include <pmc.h>
#include <pmclog.h>
#include <pmcformat.h>

/*
 * libpmc_json.rs: writes the form of ev into buf (at most len bytes, no
 * NUL) and returns the length of the whole form, or -1 for a type that has
 * none.  Hidden: it is not part of libpmc's interface.
 */
extern "C" ssize_t pmclog_ev_json(const struct pmclog_ev *ev, char *buf,
    size_t len) __attribute__((__visibility__("hidden")));

std::string
event_to_json(struct pmclog_ev *ev)
{
	char buf[512];
	ssize_t len;

	len = pmclog_ev_json(ev, buf, sizeof(buf));
	if (len < 0)
		errx(EX_USAGE, "ERROR: unrecognized event type: %d\n",
		    (int)ev->pl_type);
	if ((size_t)len <= sizeof(buf))
		return (std::string(buf, (size_t)len));

	/* Long path names: once more, into the string itself. */
	std::string json((size_t)len, '\0');
	(void)pmclog_ev_json(ev, &json[0], json.size());
	return (json);
}
