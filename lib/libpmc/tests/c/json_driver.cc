/*
 * Prints event_to_json() of each struct pmclog_ev in a file, each form
 * followed by a NUL, as pmc(8)'s filter calls it: the test of pmcformat.h
 * links this with FreeBSD's libpmc_json.cc and with libpmc's own.
 *
 *	json_driver SIZE FILE	(SIZE: sizeof(struct pmclog_ev) of the writer)
 */

#include <sys/types.h>

#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>

#include <string>

#include <pmc.h>
#include <pmclog.h>
#include <pmcformat.h>

int
main(int argc, char **argv)
{
	struct pmclog_ev ev;
	FILE *f;

	if (argc != 3)
		errx(EX_USAGE, "usage: json_driver size file");
	if (strtoul(argv[1], NULL, 10) != sizeof(ev))
		errx(EX_SOFTWARE, "struct pmclog_ev is %zu bytes here, %s there",
		    sizeof(ev), argv[1]);
	if ((f = fopen(argv[2], "rb")) == NULL)
		err(EX_NOINPUT, "%s", argv[2]);
	while (fread(&ev, sizeof(ev), 1, f) == 1) {
		std::string json = event_to_json(&ev);
		fwrite(json.data(), 1, json.size(), stdout);
		fputc('\0', stdout);
	}
	fclose(f);
	return (0);
}
