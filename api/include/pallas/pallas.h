// All public pallas runtime headers.
#pragma once

#include "pallas/dtype.h"
#include "pallas/launch.h"
#include "pallas/metadata.h"
#include "pallas/status.h"
#include "pallas/tensor_view.h"
