// Every schedule generator and transformation, in one include.
#pragma once

#include "pipeline/schedule/schedule.h"                     // IWYU pragma: export
#include "pipeline/schedule/generators/gpipe.h"              // IWYU pragma: export
#include "pipeline/schedule/generators/interleaved_1f1b.h"   // IWYU pragma: export
#include "pipeline/schedule/generators/interleaved_zero_bubble.h"  // IWYU pragma: export
#include "pipeline/schedule/generators/looped_bfs.h"         // IWYU pragma: export
#include "pipeline/schedule/generators/one_f_one_b.h"        // IWYU pragma: export
#include "pipeline/schedule/generators/recompute.h"          // IWYU pragma: export
#include "pipeline/schedule/generators/v_shape.h"            // IWYU pragma: export
#include "pipeline/schedule/generators/zero_bubble.h"        // IWYU pragma: export
#include "pipeline/schedule/registry.h"                     // IWYU pragma: export
