// Every schedule generator and transformation, in one include.
#pragma once

#include "pipeline/schedule.h"                     // IWYU pragma: export
#include "pipeline/schedules/gpipe.h"              // IWYU pragma: export
#include "pipeline/schedules/interleaved_1f1b.h"   // IWYU pragma: export
#include "pipeline/schedules/interleaved_zero_bubble.h"  // IWYU pragma: export
#include "pipeline/schedules/looped_bfs.h"         // IWYU pragma: export
#include "pipeline/schedules/make_schedule.h"      // IWYU pragma: export
#include "pipeline/schedules/one_f_one_b.h"        // IWYU pragma: export
#include "pipeline/schedules/recompute.h"          // IWYU pragma: export
#include "pipeline/schedules/v_shape.h"            // IWYU pragma: export
#include "pipeline/schedules/zero_bubble.h"        // IWYU pragma: export
