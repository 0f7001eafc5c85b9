/* lead.c - the leader's hooks in force (lead.h): none until dsv41_set_dist installs them. */
#include "lead.h"

const lead_hooks *lead_active;
