/* version — the library version string. */
#include "pagedhybrid.h"

#define PH_STR_(x) #x
#define PH_STR(x)  PH_STR_(x)

const char *ph_version_string(void) {
  return PH_STR(PH_VERSION_MAJOR) "." PH_STR(PH_VERSION_MINOR) "." PH_STR(PH_VERSION_PATCH);
}
