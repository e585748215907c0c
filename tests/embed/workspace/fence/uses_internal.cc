#include "pipeline/cell.h"
