; tinycore-clang thread pool, made by `python -m tinycore_clang.pool_ir` from RUNTIME_SRC sha256=e278862ffac5f4a842a5881fb709b1156c6e4bbea55e211169d8fa08eab7f4ec
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

%union.pthread_mutex_t = type { %struct.__pthread_mutex_s }
%struct.__pthread_mutex_s = type { i32, i32, i32, i32, i32, i16, i16, %struct.__pthread_internal_list }
%struct.__pthread_internal_list = type { ptr, ptr }
%union.pthread_cond_t = type { %struct.__pthread_cond_s }
%struct.__pthread_cond_s = type { %union.__atomic_wide_counter, %union.__atomic_wide_counter, [2 x i32], [2 x i32], i32, i32, [2 x i32] }
%union.__atomic_wide_counter = type { i64 }
%union.pthread_attr_t = type { i64, [48 x i8] }
%struct.tc_item = type { ptr, ptr, ptr, i32, i32 }

@tc_nworkers = internal unnamed_addr global i32 0, align 4
@tc_spin = internal unnamed_addr global i32 1500, align 4
@tc_launch_mu = internal global %union.pthread_mutex_t zeroinitializer, align 8
@tc_job_items = internal unnamed_addr global ptr null, align 8
@tc_job_nitems = internal unnamed_addr global i32 0, align 4
@tc_job_nthreads = internal unnamed_addr global i32 0, align 4
@tc_bar_sense = internal unnamed_addr global i32 0, align 4
@tc_job_sense = internal unnamed_addr global i32 0, align 4
@tc_remaining = internal global i32 0, align 4
@tc_gen = internal unnamed_addr global i32 0, align 4
@tc_sleepers = internal global i32 0, align 4
@tc_mu = internal global %union.pthread_mutex_t zeroinitializer, align 8
@tc_cv = internal global %union.pthread_cond_t zeroinitializer, align 8
@tc_fork_handler_installed = internal unnamed_addr global i1 false, align 4
@tc_worker_start_gen = internal unnamed_addr global [256 x i32] zeroinitializer, align 16
@tc_bar_count = internal global i32 0, align 4

; Function Attrs: mustprogress nofree norecurse nosync nounwind willreturn memory(none) uwtable
define noundef i32 @tc_abi_version() local_unnamed_addr #0 {
  ret i32 2
}

; Function Attrs: mustprogress nofree norecurse nosync nounwind willreturn memory(read, argmem: none, inaccessiblemem: none) uwtable
define i32 @tc_workers() local_unnamed_addr #1 {
  %1 = load i32, ptr @tc_nworkers, align 4, !tbaa !4
  ret i32 %1
}

; Function Attrs: mustprogress nofree norecurse nosync nounwind willreturn memory(write, argmem: none, inaccessiblemem: none) uwtable
define void @tc_set_spin(i32 noundef %0) local_unnamed_addr #2 {
  %2 = tail call i32 @llvm.smax.i32(i32 %0, i32 0)
  store i32 %2, ptr @tc_spin, align 4, !tbaa !4
  ret void
}

; Function Attrs: nounwind uwtable
define void @tc_run_batch(ptr noundef %0, i32 noundef %1, i32 noundef %2) local_unnamed_addr #3 {
  %4 = alloca i64, align 8
  %5 = alloca %union.pthread_attr_t, align 8
  %6 = icmp sgt i32 %1, 0
  br i1 %6, label %7, label %149

7:                                                ; preds = %3
  %8 = zext nneg i32 %1 to i64
  %9 = icmp ult i32 %1, 9
  br i1 %9, label %10, label %13

10:                                               ; preds = %57, %7
  %11 = phi i64 [ 0, %7 ], [ %17, %57 ]
  %12 = phi i32 [ 1, %7 ], [ %59, %57 ]
  br label %67

13:                                               ; preds = %7
  %14 = and i64 %8, 7
  %15 = icmp eq i64 %14, 0
  %16 = select i1 %15, i64 8, i64 %14
  %17 = sub nsw i64 %8, %16
  br label %18

18:                                               ; preds = %18, %13
  %19 = phi i64 [ 0, %13 ], [ %55, %18 ]
  %20 = phi <4 x i32> [ <i32 1, i32 1, i32 1, i32 1>, %13 ], [ %53, %18 ]
  %21 = phi <4 x i32> [ <i32 1, i32 1, i32 1, i32 1>, %13 ], [ %54, %18 ]
  %22 = or disjoint i64 %19, 1
  %23 = or disjoint i64 %19, 2
  %24 = or disjoint i64 %19, 3
  %25 = or disjoint i64 %19, 4
  %26 = or disjoint i64 %19, 5
  %27 = or disjoint i64 %19, 6
  %28 = or disjoint i64 %19, 7
  %29 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %19, i32 3
  %30 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %22, i32 3
  %31 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %23, i32 3
  %32 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %24, i32 3
  %33 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %25, i32 3
  %34 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %26, i32 3
  %35 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %27, i32 3
  %36 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %28, i32 3
  %37 = load i32, ptr %29, align 8, !tbaa !8
  %38 = load i32, ptr %30, align 8, !tbaa !8
  %39 = load i32, ptr %31, align 8, !tbaa !8
  %40 = load i32, ptr %32, align 8, !tbaa !8
  %41 = insertelement <4 x i32> poison, i32 %37, i64 0
  %42 = insertelement <4 x i32> %41, i32 %38, i64 1
  %43 = insertelement <4 x i32> %42, i32 %39, i64 2
  %44 = insertelement <4 x i32> %43, i32 %40, i64 3
  %45 = load i32, ptr %33, align 8, !tbaa !8
  %46 = load i32, ptr %34, align 8, !tbaa !8
  %47 = load i32, ptr %35, align 8, !tbaa !8
  %48 = load i32, ptr %36, align 8, !tbaa !8
  %49 = insertelement <4 x i32> poison, i32 %45, i64 0
  %50 = insertelement <4 x i32> %49, i32 %46, i64 1
  %51 = insertelement <4 x i32> %50, i32 %47, i64 2
  %52 = insertelement <4 x i32> %51, i32 %48, i64 3
  %53 = tail call <4 x i32> @llvm.smax.v4i32(<4 x i32> %44, <4 x i32> %20)
  %54 = tail call <4 x i32> @llvm.smax.v4i32(<4 x i32> %52, <4 x i32> %21)
  %55 = add nuw i64 %19, 8
  %56 = icmp eq i64 %55, %17
  br i1 %56, label %57, label %18, !llvm.loop !11

57:                                               ; preds = %18
  %58 = tail call <4 x i32> @llvm.smax.v4i32(<4 x i32> %53, <4 x i32> %54)
  %59 = tail call i32 @llvm.vector.reduce.smax.v4i32(<4 x i32> %58)
  br label %10

60:                                               ; preds = %67
  %61 = tail call i32 @llvm.smin.i32(i32 %2, i32 %72)
  %62 = tail call i32 @llvm.smin.i32(i32 %61, i32 256)
  %63 = icmp slt i32 %61, 2
  br i1 %63, label %64, label %92

64:                                               ; preds = %60
  br i1 %6, label %65, label %149

65:                                               ; preds = %64
  %66 = zext nneg i32 %1 to i64
  br label %75

67:                                               ; preds = %10, %67
  %68 = phi i64 [ %73, %67 ], [ %11, %10 ]
  %69 = phi i32 [ %72, %67 ], [ %12, %10 ]
  %70 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %68, i32 3
  %71 = load i32, ptr %70, align 8, !tbaa !8
  %72 = tail call i32 @llvm.smax.i32(i32 %71, i32 %69)
  %73 = add nuw nsw i64 %68, 1
  %74 = icmp eq i64 %73, %8
  br i1 %74, label %60, label %67, !llvm.loop !15

75:                                               ; preds = %65, %81
  %76 = phi i64 [ 0, %65 ], [ %82, %81 ]
  %77 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %76
  %78 = getelementptr inbounds i8, ptr %77, i64 24
  %79 = getelementptr inbounds i8, ptr %77, i64 8
  %80 = getelementptr inbounds i8, ptr %77, i64 16
  br label %84

81:                                               ; preds = %84
  %82 = add nuw nsw i64 %76, 1
  %83 = icmp eq i64 %82, %66
  br i1 %83, label %149, label %75, !llvm.loop !16

84:                                               ; preds = %75, %84
  %85 = phi i32 [ 0, %75 ], [ %89, %84 ]
  %86 = load ptr, ptr %77, align 8, !tbaa !17
  %87 = load ptr, ptr %79, align 8, !tbaa !18
  %88 = load ptr, ptr %80, align 8, !tbaa !19
  tail call void %86(ptr noundef %87, ptr noundef %88, i32 noundef %85) #9
  %89 = add nuw nsw i32 %85, 1
  %90 = load i32, ptr %78, align 8, !tbaa !8
  %91 = icmp sgt i32 %90, %89
  br i1 %91, label %84, label %81, !llvm.loop !20

92:                                               ; preds = %60
  %93 = tail call i32 @pthread_mutex_lock(ptr noundef nonnull @tc_launch_mu) #9
  %94 = add nsw i32 %62, -1
  %95 = load i1, ptr @tc_fork_handler_installed, align 4
  br i1 %95, label %98, label %96

96:                                               ; preds = %92
  %97 = tail call i32 @__register_atfork(ptr noundef null, ptr noundef null, ptr noundef nonnull @tc_after_fork_child, ptr noundef null) #9
  store i1 true, ptr @tc_fork_handler_installed, align 4
  br label %98

98:                                               ; preds = %96, %92
  %99 = load i32, ptr @tc_nworkers, align 4, !tbaa !4
  %100 = icmp slt i32 %99, %94
  br i1 %100, label %101, label %120

101:                                              ; preds = %98
  %102 = sext i32 %99 to i64
  %103 = zext nneg i32 %94 to i64
  br label %104

104:                                              ; preds = %117, %101
  %105 = phi i64 [ %102, %101 ], [ %106, %117 ]
  %106 = add nsw i64 %105, 1
  call void @llvm.lifetime.start.p0(i64 8, ptr nonnull %4) #9
  call void @llvm.lifetime.start.p0(i64 56, ptr nonnull %5) #9
  %107 = call i32 @pthread_attr_init(ptr noundef nonnull %5) #9
  %108 = call i32 @pthread_attr_setdetachstate(ptr noundef nonnull %5, i32 noundef 1) #9
  %109 = load atomic i32, ptr @tc_gen acquire, align 4
  %110 = getelementptr inbounds [256 x i32], ptr @tc_worker_start_gen, i64 0, i64 %106
  store i32 %109, ptr %110, align 4, !tbaa !4
  %111 = inttoptr i64 %106 to ptr
  %112 = call i32 @pthread_create(ptr noundef nonnull %4, ptr noundef nonnull %5, ptr noundef nonnull @tc_worker, ptr noundef %111) #9
  %113 = call i32 @pthread_attr_destroy(ptr noundef nonnull %5) #9
  %114 = icmp eq i32 %112, 0
  br i1 %114, label %117, label %115

115:                                              ; preds = %104
  call void @llvm.lifetime.end.p0(i64 56, ptr nonnull %5) #9
  call void @llvm.lifetime.end.p0(i64 8, ptr nonnull %4) #9
  %116 = load i32, ptr @tc_nworkers, align 4, !tbaa !4
  br label %120

117:                                              ; preds = %104
  %118 = trunc nsw i64 %106 to i32
  store i32 %118, ptr @tc_nworkers, align 4, !tbaa !4
  call void @llvm.lifetime.end.p0(i64 56, ptr nonnull %5) #9
  call void @llvm.lifetime.end.p0(i64 8, ptr nonnull %4) #9
  %119 = icmp eq i64 %106, %103
  br i1 %119, label %120, label %104

120:                                              ; preds = %117, %98, %115
  %121 = phi i32 [ %99, %98 ], [ %116, %115 ], [ %118, %117 ]
  %122 = add nsw i32 %121, 1
  %123 = call i32 @llvm.smin.i32(i32 %122, i32 %62)
  store ptr %0, ptr @tc_job_items, align 8, !tbaa !21
  store i32 %1, ptr @tc_job_nitems, align 4, !tbaa !4
  store i32 %123, ptr @tc_job_nthreads, align 4, !tbaa !4
  %124 = load atomic i32, ptr @tc_bar_sense monotonic, align 4
  store i32 %124, ptr @tc_job_sense, align 4, !tbaa !4
  %125 = add nsw i32 %123, -1
  store atomic i32 %125, ptr @tc_remaining monotonic, align 4
  %126 = load i32, ptr @tc_gen, align 4, !tbaa !4
  %127 = add i32 %126, 1
  store atomic i32 %127, ptr @tc_gen seq_cst, align 4
  %128 = load atomic i32, ptr @tc_sleepers seq_cst, align 4
  %129 = icmp sgt i32 %128, 0
  br i1 %129, label %130, label %134

130:                                              ; preds = %120
  %131 = call i32 @pthread_mutex_lock(ptr noundef nonnull @tc_mu) #9
  %132 = call i32 @pthread_cond_broadcast(ptr noundef nonnull @tc_cv) #9
  %133 = call i32 @pthread_mutex_unlock(ptr noundef nonnull @tc_mu) #9
  br label %134

134:                                              ; preds = %130, %120
  call fastcc void @tc_execute(i32 noundef 0, ptr noundef %0, i32 noundef %1, i32 noundef %123, i32 noundef %124)
  %135 = load atomic i32, ptr @tc_remaining acquire, align 4
  %136 = icmp eq i32 %135, 0
  br i1 %136, label %147, label %137

137:                                              ; preds = %134, %144
  %138 = phi i32 [ %139, %144 ], [ 0, %134 ]
  %139 = add nuw nsw i32 %138, 1
  %140 = icmp ult i32 %138, 199
  br i1 %140, label %141, label %142

141:                                              ; preds = %137
  call void @llvm.x86.sse2.pause()
  br label %144

142:                                              ; preds = %137
  %143 = call i32 @sched_yield() #9
  br label %144

144:                                              ; preds = %141, %142
  %145 = load atomic i32, ptr @tc_remaining acquire, align 4
  %146 = icmp eq i32 %145, 0
  br i1 %146, label %147, label %137, !llvm.loop !22

147:                                              ; preds = %144, %134
  %148 = call i32 @pthread_mutex_unlock(ptr noundef nonnull @tc_launch_mu) #9
  br label %149

149:                                              ; preds = %81, %3, %64, %147
  ret void
}

; Function Attrs: mustprogress nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.start.p0(i64 immarg, ptr nocapture) #4

; Function Attrs: mustprogress nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.end.p0(i64 immarg, ptr nocapture) #4

; Function Attrs: nounwind
declare i32 @pthread_mutex_lock(ptr noundef) local_unnamed_addr #5

; Function Attrs: nounwind
declare i32 @pthread_cond_broadcast(ptr noundef) local_unnamed_addr #5

; Function Attrs: nounwind
declare i32 @pthread_mutex_unlock(ptr noundef) local_unnamed_addr #5

; Function Attrs: nounwind uwtable
define internal fastcc void @tc_execute(i32 noundef %0, ptr nocapture noundef readonly %1, i32 noundef %2, i32 noundef %3, i32 noundef %4) unnamed_addr #3 {
  %6 = icmp sgt i32 %2, 0
  br i1 %6, label %7, label %12

7:                                                ; preds = %5
  %8 = icmp slt i32 %3, 2
  %9 = icmp eq i32 %0, 0
  %10 = zext nneg i32 %2 to i64
  %11 = zext nneg i32 %2 to i64
  br label %13

12:                                               ; preds = %92, %5
  ret void

13:                                               ; preds = %7, %92
  %14 = phi i64 [ 0, %7 ], [ %95, %92 ]
  %15 = phi i32 [ 0, %7 ], [ %94, %92 ]
  %16 = phi i32 [ %4, %7 ], [ %93, %92 ]
  %17 = getelementptr inbounds %struct.tc_item, ptr %1, i64 %14
  %18 = getelementptr inbounds i8, ptr %17, i64 24
  %19 = load i32, ptr %18, align 8, !tbaa !8
  %20 = icmp slt i32 %19, 2
  %21 = or i1 %8, %20
  br i1 %21, label %22, label %34

22:                                               ; preds = %13
  br i1 %9, label %23, label %92

23:                                               ; preds = %22
  %24 = getelementptr inbounds i8, ptr %17, i64 8
  %25 = getelementptr inbounds i8, ptr %17, i64 16
  br label %26

26:                                               ; preds = %23, %26
  %27 = phi i32 [ 0, %23 ], [ %31, %26 ]
  %28 = load ptr, ptr %17, align 8, !tbaa !17
  %29 = load ptr, ptr %24, align 8, !tbaa !18
  %30 = load ptr, ptr %25, align 8, !tbaa !19
  tail call void %28(ptr noundef %29, ptr noundef %30, i32 noundef %27) #9
  %31 = add nuw nsw i32 %27, 1
  %32 = load i32, ptr %18, align 8, !tbaa !8
  %33 = icmp sgt i32 %32, %31
  br i1 %33, label %26, label %92, !llvm.loop !23

34:                                               ; preds = %13
  %35 = icmp eq i32 %15, 0
  br i1 %35, label %55, label %36

36:                                               ; preds = %34
  %37 = xor i32 %16, 1
  %38 = atomicrmw add ptr @tc_bar_count, i32 1 acq_rel, align 4
  %39 = add i32 %38, 1
  %40 = icmp eq i32 %39, %3
  br i1 %40, label %44, label %41

41:                                               ; preds = %36
  %42 = load atomic i32, ptr @tc_bar_sense acquire, align 4
  %43 = icmp eq i32 %42, %37
  br i1 %43, label %55, label %45

44:                                               ; preds = %36
  store atomic i32 0, ptr @tc_bar_count monotonic, align 4
  store atomic i32 %37, ptr @tc_bar_sense release, align 4
  br label %55

45:                                               ; preds = %41, %52
  %46 = phi i32 [ %47, %52 ], [ 0, %41 ]
  %47 = add nuw nsw i32 %46, 1
  %48 = icmp ult i32 %46, 199
  br i1 %48, label %49, label %50

49:                                               ; preds = %45
  tail call void @llvm.x86.sse2.pause()
  br label %52

50:                                               ; preds = %45
  %51 = tail call i32 @sched_yield() #9
  br label %52

52:                                               ; preds = %50, %49
  %53 = load atomic i32, ptr @tc_bar_sense acquire, align 4
  %54 = icmp eq i32 %53, %37
  br i1 %54, label %55, label %45, !llvm.loop !24

55:                                               ; preds = %52, %44, %41, %34
  %56 = phi i32 [ %16, %34 ], [ %37, %41 ], [ %37, %44 ], [ %37, %52 ]
  %57 = load i32, ptr %18, align 8, !tbaa !8
  %58 = icmp sgt i32 %57, %0
  br i1 %58, label %59, label %62

59:                                               ; preds = %55
  %60 = getelementptr inbounds i8, ptr %17, i64 8
  %61 = getelementptr inbounds i8, ptr %17, i64 16
  br label %65

62:                                               ; preds = %65, %55
  %63 = add nuw nsw i64 %14, 1
  %64 = icmp ult i64 %63, %10
  br i1 %64, label %73, label %92

65:                                               ; preds = %59, %65
  %66 = phi i32 [ %0, %59 ], [ %70, %65 ]
  %67 = load ptr, ptr %17, align 8, !tbaa !17
  %68 = load ptr, ptr %60, align 8, !tbaa !18
  %69 = load ptr, ptr %61, align 8, !tbaa !19
  tail call void %67(ptr noundef %68, ptr noundef %69, i32 noundef %66) #9
  %70 = add nsw i32 %66, %3
  %71 = load i32, ptr %18, align 8, !tbaa !8
  %72 = icmp slt i32 %70, %71
  br i1 %72, label %65, label %62, !llvm.loop !25

73:                                               ; preds = %62
  %74 = xor i32 %56, 1
  %75 = atomicrmw add ptr @tc_bar_count, i32 1 acq_rel, align 4
  %76 = add i32 %75, 1
  %77 = icmp eq i32 %76, %3
  br i1 %77, label %81, label %78

78:                                               ; preds = %73
  %79 = load atomic i32, ptr @tc_bar_sense acquire, align 4
  %80 = icmp eq i32 %79, %74
  br i1 %80, label %92, label %82

81:                                               ; preds = %73
  store atomic i32 0, ptr @tc_bar_count monotonic, align 4
  store atomic i32 %74, ptr @tc_bar_sense release, align 4
  br label %92

82:                                               ; preds = %78, %89
  %83 = phi i32 [ %84, %89 ], [ 0, %78 ]
  %84 = add nuw nsw i32 %83, 1
  %85 = icmp ult i32 %83, 199
  br i1 %85, label %86, label %87

86:                                               ; preds = %82
  tail call void @llvm.x86.sse2.pause()
  br label %89

87:                                               ; preds = %82
  %88 = tail call i32 @sched_yield() #9
  br label %89

89:                                               ; preds = %87, %86
  %90 = load atomic i32, ptr @tc_bar_sense acquire, align 4
  %91 = icmp eq i32 %90, %74
  br i1 %91, label %92, label %82, !llvm.loop !24

92:                                               ; preds = %89, %26, %81, %78, %62, %22
  %93 = phi i32 [ %16, %22 ], [ %56, %62 ], [ %74, %78 ], [ %74, %81 ], [ %16, %26 ], [ %74, %89 ]
  %94 = phi i32 [ 1, %22 ], [ 0, %62 ], [ 0, %78 ], [ 0, %81 ], [ 1, %26 ], [ 0, %89 ]
  %95 = add nuw nsw i64 %14, 1
  %96 = icmp eq i64 %95, %11
  br i1 %96, label %12, label %13, !llvm.loop !26
}

; Function Attrs: nounwind uwtable
define void @tc_run(ptr noundef %0, ptr noundef %1, ptr noundef %2, i32 noundef %3, i32 noundef %4) local_unnamed_addr #3 {
  %6 = alloca %struct.tc_item, align 8
  call void @llvm.lifetime.start.p0(i64 32, ptr nonnull %6) #9
  store ptr %0, ptr %6, align 8, !tbaa !17
  %7 = getelementptr inbounds i8, ptr %6, i64 8
  store ptr %1, ptr %7, align 8, !tbaa !18
  %8 = getelementptr inbounds i8, ptr %6, i64 16
  store ptr %2, ptr %8, align 8, !tbaa !19
  %9 = getelementptr inbounds i8, ptr %6, i64 24
  store i32 %3, ptr %9, align 8, !tbaa !8
  %10 = getelementptr inbounds i8, ptr %6, i64 28
  store i32 0, ptr %10, align 4, !tbaa !27
  call void @tc_run_batch(ptr noundef nonnull %6, i32 noundef 1, i32 noundef %4)
  call void @llvm.lifetime.end.p0(i64 32, ptr nonnull %6) #9
  ret void
}

; Function Attrs: nounwind uwtable
define void @tc_run_graph(ptr noundef %0, i32 noundef %1, i32 noundef %2) local_unnamed_addr #3 {
  %4 = icmp sgt i32 %1, 0
  br i1 %4, label %5, label %39

5:                                                ; preds = %3
  %6 = zext nneg i32 %1 to i64
  br label %7

7:                                                ; preds = %5, %23
  %8 = phi i32 [ %24, %23 ], [ 0, %5 ]
  %9 = sext i32 %8 to i64
  %10 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %9
  %11 = getelementptr inbounds i8, ptr %10, i64 24
  %12 = load i32, ptr %11, align 8, !tbaa !8
  %13 = icmp slt i32 %12, 2
  br i1 %13, label %16, label %14

14:                                               ; preds = %7
  %15 = icmp slt i32 %8, %1
  br i1 %15, label %26, label %36

16:                                               ; preds = %7
  %17 = load ptr, ptr %10, align 8, !tbaa !17
  %18 = getelementptr inbounds i8, ptr %10, i64 8
  %19 = load ptr, ptr %18, align 8, !tbaa !18
  %20 = getelementptr inbounds i8, ptr %10, i64 16
  %21 = load ptr, ptr %20, align 8, !tbaa !19
  tail call void %17(ptr noundef %19, ptr noundef %21, i32 noundef 0) #9
  %22 = add nsw i32 %8, 1
  br label %23

23:                                               ; preds = %16, %36
  %24 = phi i32 [ %22, %16 ], [ %37, %36 ]
  %25 = icmp slt i32 %24, %1
  br i1 %25, label %7, label %39, !llvm.loop !28

26:                                               ; preds = %14, %31
  %27 = phi i64 [ %32, %31 ], [ %9, %14 ]
  %28 = getelementptr inbounds %struct.tc_item, ptr %0, i64 %27, i32 3
  %29 = load i32, ptr %28, align 8, !tbaa !8
  %30 = icmp sgt i32 %29, 1
  br i1 %30, label %31, label %34

31:                                               ; preds = %26
  %32 = add nsw i64 %27, 1
  %33 = icmp eq i64 %32, %6
  br i1 %33, label %36, label %26, !llvm.loop !29

34:                                               ; preds = %26
  %35 = trunc nsw i64 %27 to i32
  br label %36

36:                                               ; preds = %31, %34, %14
  %37 = phi i32 [ %8, %14 ], [ %35, %34 ], [ %1, %31 ]
  %38 = sub nsw i32 %37, %8
  tail call void @tc_run_batch(ptr noundef nonnull %10, i32 noundef %38, i32 noundef %2)
  br label %23

39:                                               ; preds = %23, %3
  ret void
}

declare i32 @__register_atfork(ptr noundef, ptr noundef, ptr noundef, ptr noundef) local_unnamed_addr #6

; Function Attrs: mustprogress nofree norecurse nosync nounwind willreturn memory(write, argmem: none, inaccessiblemem: none) uwtable
define internal void @tc_after_fork_child() #2 {
  tail call void @llvm.memset.p0.i64(ptr noundef nonnull align 8 dereferenceable(40) @tc_mu, i8 0, i64 40, i1 false)
  tail call void @llvm.memset.p0.i64(ptr noundef nonnull align 8 dereferenceable(40) @tc_launch_mu, i8 0, i64 40, i1 false)
  tail call void @llvm.memset.p0.i64(ptr noundef nonnull align 8 dereferenceable(48) @tc_cv, i8 0, i64 48, i1 false)
  store i32 0, ptr @tc_nworkers, align 4, !tbaa !4
  store i32 0, ptr @tc_sleepers, align 4, !tbaa !4
  store i32 0, ptr @tc_bar_count, align 4, !tbaa !4
  ret void
}

; Function Attrs: nounwind
declare i32 @pthread_attr_init(ptr noundef) local_unnamed_addr #5

; Function Attrs: nounwind
declare i32 @pthread_attr_setdetachstate(ptr noundef, i32 noundef) local_unnamed_addr #5

; Function Attrs: nounwind
declare i32 @pthread_create(ptr noundef, ptr noundef, ptr noundef, ptr noundef) local_unnamed_addr #5

; Function Attrs: noreturn nounwind uwtable
define internal noalias noundef nonnull ptr @tc_worker(ptr noundef %0) #7 {
  %2 = ptrtoint ptr %0 to i64
  %3 = trunc i64 %2 to i32
  %4 = shl i64 %2, 32
  %5 = ashr exact i64 %4, 32
  %6 = getelementptr inbounds [256 x i32], ptr @tc_worker_start_gen, i64 0, i64 %5
  %7 = load i32, ptr %6, align 4, !tbaa !4
  br label %8

8:                                                ; preds = %52, %1
  %9 = phi i32 [ %7, %1 ], [ %41, %52 ]
  br label %10

10:                                               ; preds = %8, %40
  %11 = load atomic i32, ptr @tc_gen acquire, align 4
  %12 = icmp eq i32 %11, %9
  %13 = load i32, ptr @tc_spin, align 4
  %14 = icmp sgt i32 %13, 0
  %15 = select i1 %12, i1 %14, i1 false
  br i1 %15, label %16, label %24

16:                                               ; preds = %10, %16
  %17 = phi i32 [ %18, %16 ], [ 0, %10 ]
  %18 = add nuw nsw i32 %17, 1
  tail call void @llvm.x86.sse2.pause()
  %19 = load atomic i32, ptr @tc_gen acquire, align 4
  %20 = icmp eq i32 %19, %9
  %21 = load i32, ptr @tc_spin, align 4
  %22 = icmp slt i32 %18, %21
  %23 = select i1 %20, i1 %22, i1 false
  br i1 %23, label %16, label %24, !llvm.loop !30

24:                                               ; preds = %16, %10
  %25 = phi i32 [ %11, %10 ], [ %19, %16 ]
  %26 = phi i1 [ %12, %10 ], [ %20, %16 ]
  br i1 %26, label %27, label %40

27:                                               ; preds = %24
  %28 = tail call i32 @pthread_mutex_lock(ptr noundef nonnull @tc_mu) #9
  %29 = atomicrmw add ptr @tc_sleepers, i32 1 seq_cst, align 4
  %30 = load atomic i32, ptr @tc_gen seq_cst, align 4
  %31 = icmp eq i32 %30, %9
  br i1 %31, label %32, label %36

32:                                               ; preds = %27, %32
  %33 = tail call i32 @pthread_cond_wait(ptr noundef nonnull @tc_cv, ptr noundef nonnull @tc_mu) #9
  %34 = load atomic i32, ptr @tc_gen seq_cst, align 4
  %35 = icmp eq i32 %34, %9
  br i1 %35, label %32, label %36, !llvm.loop !31

36:                                               ; preds = %32, %27
  %37 = phi i32 [ %30, %27 ], [ %34, %32 ]
  %38 = atomicrmw sub ptr @tc_sleepers, i32 1 seq_cst, align 4
  %39 = tail call i32 @pthread_mutex_unlock(ptr noundef nonnull @tc_mu) #9
  br label %40

40:                                               ; preds = %36, %24
  %41 = phi i32 [ %37, %36 ], [ %25, %24 ]
  %42 = load ptr, ptr @tc_job_items, align 8, !tbaa !21
  %43 = load i32, ptr @tc_job_nitems, align 4, !tbaa !4
  %44 = load i32, ptr @tc_job_nthreads, align 4, !tbaa !4
  %45 = load i32, ptr @tc_job_sense, align 4, !tbaa !4
  %46 = load atomic i32, ptr @tc_gen acquire, align 4
  %47 = icmp eq i32 %46, %41
  br i1 %47, label %48, label %10

48:                                               ; preds = %40
  %49 = icmp sgt i32 %44, %3
  br i1 %49, label %50, label %52

50:                                               ; preds = %48
  tail call fastcc void @tc_execute(i32 noundef %3, ptr noundef %42, i32 noundef %43, i32 noundef %44, i32 noundef %45)
  %51 = atomicrmw sub ptr @tc_remaining, i32 1 acq_rel, align 4
  br label %52

52:                                               ; preds = %50, %48
  br label %8
}

; Function Attrs: nounwind
declare i32 @pthread_attr_destroy(ptr noundef) local_unnamed_addr #5

; Function Attrs: mustprogress nocallback nofree nounwind willreturn memory(argmem: write)
declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg) #8

declare i32 @pthread_cond_wait(ptr noundef, ptr noundef) local_unnamed_addr #6

; Function Attrs: nounwind
declare void @llvm.x86.sse2.pause() #9

; Function Attrs: nounwind
declare i32 @sched_yield() local_unnamed_addr #5

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare i32 @llvm.smax.i32(i32, i32) #10

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare i32 @llvm.smin.i32(i32, i32) #10

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare <4 x i32> @llvm.smax.v4i32(<4 x i32>, <4 x i32>) #10

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare i32 @llvm.vector.reduce.smax.v4i32(<4 x i32>) #10

attributes #0 = { mustprogress nofree norecurse nosync nounwind willreturn memory(none) uwtable "min-legal-vector-width"="0" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #1 = { mustprogress nofree norecurse nosync nounwind willreturn memory(read, argmem: none, inaccessiblemem: none) uwtable "min-legal-vector-width"="0" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #2 = { mustprogress nofree norecurse nosync nounwind willreturn memory(write, argmem: none, inaccessiblemem: none) uwtable "min-legal-vector-width"="0" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #3 = { nounwind uwtable "min-legal-vector-width"="0" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #4 = { mustprogress nocallback nofree nosync nounwind willreturn memory(argmem: readwrite) }
attributes #5 = { nounwind "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #6 = { "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #7 = { noreturn nounwind uwtable "min-legal-vector-width"="0" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="x86-64" "target-features"="+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+x87" "tune-cpu"="generic" }
attributes #8 = { mustprogress nocallback nofree nounwind willreturn memory(argmem: write) }
attributes #9 = { nounwind }
attributes #10 = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }

!llvm.module.flags = !{!0, !1, !2}
!llvm.ident = !{!3}

!0 = !{i32 1, !"wchar_size", i32 4}
!1 = !{i32 8, !"PIC Level", i32 2}
!2 = !{i32 7, !"uwtable", i32 2}
!3 = !{!"Debian clang version 19.1.7 (3~deb12u1)"}
!4 = !{!5, !5, i64 0}
!5 = !{!"int", !6, i64 0}
!6 = !{!"omnipotent char", !7, i64 0}
!7 = !{!"Simple C/C++ TBAA"}
!8 = !{!9, !5, i64 24}
!9 = !{!"", !10, i64 0, !10, i64 8, !10, i64 16, !5, i64 24, !5, i64 28}
!10 = !{!"any pointer", !6, i64 0}
!11 = distinct !{!11, !12, !13, !14}
!12 = !{!"llvm.loop.mustprogress"}
!13 = !{!"llvm.loop.isvectorized", i32 1}
!14 = !{!"llvm.loop.unroll.runtime.disable"}
!15 = distinct !{!15, !12, !14, !13}
!16 = distinct !{!16, !12}
!17 = !{!9, !10, i64 0}
!18 = !{!9, !10, i64 8}
!19 = !{!9, !10, i64 16}
!20 = distinct !{!20, !12}
!21 = !{!10, !10, i64 0}
!22 = distinct !{!22, !12}
!23 = distinct !{!23, !12}
!24 = distinct !{!24, !12}
!25 = distinct !{!25, !12}
!26 = distinct !{!26, !12}
!27 = !{!9, !5, i64 28}
!28 = distinct !{!28, !12}
!29 = distinct !{!29, !12}
!30 = distinct !{!30, !12}
!31 = distinct !{!31, !12}
