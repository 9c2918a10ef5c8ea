#include "tiffio.h"

int main()
{
    TIFFGetVersion();
    return 0;
}
