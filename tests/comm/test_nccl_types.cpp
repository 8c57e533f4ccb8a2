// SPDX-License-Identifier: Apache-2.0
// How dtypes and reductions map onto NCCL (comm/src/nccl_types.h), checked without a GPU. The
// engine broadcasts every module buffer at wrap time, so each buffer dtype a model may hold must
// map (a bool mask, an int16 table); a bool reduction must stay 0/1.

#include <gtest/gtest.h>

#include <string>

#include "nccl_types.h"

namespace zs = zeroshard;
using zs::ReduceOp;
using zs::comm::to_nccl_op;
using zs::comm::to_nccl_type;

TEST(NcclTypes, NativeTypesMapOneToOne) {
  const std::pair<c10::ScalarType, ncclDataType_t> native[] = {
      {c10::kFloat, ncclFloat32}, {c10::kDouble, ncclFloat64}, {c10::kHalf, ncclFloat16},
      {c10::kBFloat16, ncclBfloat16}, {c10::kInt, ncclInt32}, {c10::kLong, ncclInt64},
      {c10::kByte, ncclUint8}, {c10::kChar, ncclInt8}};
  for (const auto& [dtype, nccl] : native) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto t = to_nccl_type(dtype);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->type, nccl);
    EXPECT_EQ(t->per_element, 1);
    EXPECT_TRUE(t->reducible);
  }
}

TEST(NcclTypes, BoolTravelsAsUint8AndReducesLogically) {
  const auto t = to_nccl_type(c10::kBool);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->type, ncclUint8);
  EXPECT_EQ(t->per_element, 1);
  EXPECT_TRUE(t->reducible);
  EXPECT_EQ(to_nccl_op(ReduceOp::kSum, c10::kBool), ncclMax);  // or: a sum would store 2
  EXPECT_EQ(to_nccl_op(ReduceOp::kMax, c10::kBool), ncclMax);
  EXPECT_EQ(to_nccl_op(ReduceOp::kMin, c10::kBool), ncclMin);  // and
}

TEST(NcclTypes, ShortTravelsAsTwoBytesAndIsNotReducible) {
  const auto t = to_nccl_type(c10::kShort);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->type, ncclUint8);
  EXPECT_EQ(t->per_element, 2);
  EXPECT_FALSE(t->reducible);
}

TEST(NcclTypes, OtherOpsKeepTheirNcclOp) {
  EXPECT_EQ(to_nccl_op(ReduceOp::kSum, c10::kFloat), ncclSum);
  EXPECT_EQ(to_nccl_op(ReduceOp::kAvg, c10::kBFloat16), ncclAvg);
  EXPECT_EQ(to_nccl_op(ReduceOp::kMax, c10::kInt), ncclMax);
  EXPECT_EQ(to_nccl_op(ReduceOp::kMin, c10::kByte), ncclMin);
}

TEST(NcclTypes, UnmappedDtypesAreRefusedAndTheListNamesEveryMappedOne) {
  EXPECT_FALSE(to_nccl_type(c10::kComplexFloat).has_value());
  EXPECT_FALSE(to_nccl_type(c10::kQInt8).has_value());
  const std::string listed = zs::comm::kNcclSupportedDtypes;
  for (const char* name : {"Float", "Double", "Half", "BFloat16", "Int", "Long", "Byte", "Char", "Bool", "Short"}) {
    EXPECT_NE(listed.find(name), std::string::npos) << name;
  }
}
