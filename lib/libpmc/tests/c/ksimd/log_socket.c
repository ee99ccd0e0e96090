/*
 * A process sampling PMC on this process, logging to one end of a Unix
 * stream socket pair that the program reads back from the other end with
 * pmclog(3): log_pipe.c's checks, with a socket for the log.
 */

#define	LOG_OVER_SOCKET	1
#include "log_pipe.c"
